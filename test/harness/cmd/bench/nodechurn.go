package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// What one node's instance receives when other nodes' claims and PVs
// change (the node scenario, our provisioner only: the figure comes from
// its csi_topology_provisioner_cache_events_total). After the run's claims
// are Bound, the bench patches an annotation on up to churnClaims
// background claims and on their PVs, then on one claim and one PV of the
// run: the sentinels, which the instance does watch. A watch delivers a
// resource's events in the order of their writes, so once the instance
// counted the sentinels' events it has received every event of the
// background's changes it was ever going to; the count beyond the
// sentinels is what it received of other nodes. An instance that receives
// the others' events too is done once all of them have arrived.
const (
	churnClaims = 1000
	// churnAnnotation is the annotation the changes set.
	churnAnnotation = "bench.csi-topology-provisioner.io/churn"
	// cacheEvents is our provisioner's metric of its informers' events.
	cacheEvents = "csi_topology_provisioner_cache_events_total"
)

// otherNodeEvents changes background claims and PVs and returns how many
// objects it changed and how many watch events of claims and PVs the
// instance whose /metrics is at metricsURL received for them.
func (e *env) otherNodeEvents(ctx context.Context, metricsURL, ns string) (changed int, received float64, err error) {
	before, err := lab.Scrape(ctx, metricsURL)
	if err != nil {
		return 0, 0, err
	}
	claims, err := e.client.CoreV1().PersistentVolumeClaims(backgroundNamespace).List(ctx,
		metav1.ListOptions{Limit: churnClaims, ResourceVersion: ""})
	if err != nil {
		return 0, 0, err
	}
	if changed, err = e.churn(ctx, claims.Items); err != nil {
		return changed, 0, err
	}
	sentinels, err := e.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || len(sentinels.Items) != 1 || sentinels.Items[0].Spec.VolumeName == "" {
		return changed, 0, fmt.Errorf("no bound claim of the run to change last: %v", err)
	}
	if _, err := e.churn(ctx, sentinels.Items); err != nil {
		return changed, 0, err
	}
	// Done when every change has arrived (an instance that watches every
	// claim and PV), or when only the sentinels' have and that holds for
	// a scrape (the sentinels come last in their watches: nothing of the
	// others is still to come).
	var after, last map[string]float64
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := lab.Scrape(ctx, metricsURL)
		if err != nil {
			return false, nil
		}
		last, after = after, map[string]float64{}
		for _, res := range []string{"claims", "volumes"} {
			after[res] = lab.MetricValue(m, cacheEvents, map[string]string{"resource": res}) -
				lab.MetricValue(before, cacheEvents, map[string]string{"resource": res})
		}
		if after["claims"] < 1 || after["volumes"] < 1 {
			return false, nil
		}
		onlySentinels := after["claims"] == 1 && after["volumes"] == 1 && last != nil && last["claims"] == 1 && last["volumes"] == 1
		return onlySentinels || after["claims"]+after["volumes"] >= float64(changed+2), nil
	})
	if err != nil {
		return changed, 0, fmt.Errorf("the instance never received the changes of its own claim and PV (%s, received %v): %w", cacheEvents, after, err)
	}
	return changed, after["claims"] + after["volumes"] - 2, nil
}

// churn patches churnAnnotation on each claim and on its PV, eight at a
// time, and returns how many objects it changed.
func (e *env) churn(ctx context.Context, claims []v1.PersistentVolumeClaim) (int, error) {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, churnAnnotation, time.Now().Format(time.RFC3339Nano))
	var changed atomic.Int64
	err := parallel(ctx, len(claims), 8, func(ctx context.Context, i int) error {
		n, err := e.churnOne(ctx, claims[i], patch)
		changed.Add(int64(n))
		if err != nil {
			return fmt.Errorf("changing claims and PVs: %w", err)
		}
		return nil
	})
	return int(changed.Load()), err
}

// churnOne patches one claim and its PV, the claim first.
func (e *env) churnOne(ctx context.Context, c v1.PersistentVolumeClaim, patch []byte) (int, error) {
	if _, err := e.client.CoreV1().PersistentVolumeClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return 0, err
	}
	if c.Spec.VolumeName == "" {
		return 1, nil
	}
	if _, err := e.client.CoreV1().PersistentVolumes().Patch(ctx, c.Spec.VolumeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return 1, err
	}
	return 2, nil
}
