package e2enode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestNewClassBurstSpreads: a WaitForFirstConsumer class of the node-local
// driver and a burst of 6 pods with claims of it are created together, as
// when a StatefulSet ships with its class. The class admits three identical
// nodes (allowedTopologies); every node's instance publishes a capacity
// object for it only once the class exists, and two of them seconds after
// the first (their drivers answer GetCapacity slowly). The burst must not
// be placed by which node published first: every node gets at least one
// pod, none gets them all, and no pod is refused for capacity.
func TestNewClassBurstSpreads(t *testing.T) {
	for _, tc := range []struct {
		name string
		// podsFirst: the pods and claims are created before the class
		// (they wait for it), else right after it.
		podsFirst bool
	}{
		{name: "class then pods"},
		{name: "pods then class", podsFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) { newClassBurst(t, tc.podsFirst) })
	}
}

// slowCapacity is how long GetCapacity takes on the slow nodes of
// TestNewClassBurstSpreads.
const slowCapacity = 2 * time.Second

func newClassBurst(t *testing.T, podsFirst bool) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	const pods = 6
	nodesOfClass := nl.Names[:3]
	class := ns
	t.Cleanup(func() {
		_ = client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), class, metav1.DeleteOptions{})
	})
	// Two of the class's nodes answer GetCapacity slowly, as a driver under
	// load does: their instances publish for the new class seconds after
	// the first node's.
	for _, node := range nodesOfClass[1:] {
		if err := nl.SetFaults(ctx, node, []faults.Rule{{Method: "GetCapacity", Latency: faults.Duration(slowCapacity)}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := nl.SetFaults(context.WithoutCancel(ctx), node, nil); err != nil {
				t.Errorf("clearing the faults of %s: %v", node, err)
			}
		})
	}
	seen := watchCapacityObjects(t, ctx, class)
	var names []string
	createPods := func() {
		for i := 0; i < pods; i++ {
			name := fmt.Sprintf("cold-%d", i)
			nl.ClaimAndPod(t, ctx, ns, class, name, gi, "")
			names = append(names, name)
		}
	}
	if podsFirst {
		createPods()
	}
	start := time.Now()
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: lab.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		ReclaimPolicy:     ptr.To(v1.PersistentVolumeReclaimDelete),
		AllowedTopologies: []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: v1.LabelHostname, Values: nodesOfClass}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !podsFirst {
		createPods()
	}
	t.Logf("class and %d pods created in %s", pods, time.Since(start).Round(time.Millisecond))
	waitAllBound(t, ctx, ns, names)
	perNode := map[string]int{}
	for _, name := range names {
		perNode[lab.WaitPodNode(t, ctx, nl.Cluster, ns, name)]++
	}
	t.Logf("pods per node: %s; capacity objects published after the class: %s", countBy(perNode), seen.since(start))
	for _, node := range nodesOfClass {
		if perNode[node] == 0 || perNode[node] == pods {
			t.Errorf("the burst of %d pods landed %s on the class's nodes %v: want every node to get at least one, none all\n%s",
				pods, countBy(perNode), nodesOfClass, lab.Describe(ctx, nl.Cluster, ns))
			break
		}
	}
	// No pod was refused for capacity while every node had room.
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if capacityReason.MatchString(e.Message) {
			t.Errorf("pod %s refused for capacity although every node had room: %s", e.InvolvedObject.Name, e.Message)
		}
	}
}

// capacityArrivals records when each node's capacity object of a class
// was first seen.
type capacityArrivals struct {
	mu sync.Mutex
	at map[string]time.Time
}

// since describes the arrivals relative to start.
func (a *capacityArrivals) since(start time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string]int{}
	for node, at := range a.at {
		m[node] = int(at.Sub(start).Milliseconds())
	}
	return strings.ReplaceAll(countBy(m), ":", "=") + " (ms)"
}

// watchCapacityObjects watches the capacity objects of class until the
// test ends and records when each node's first appeared.
func watchCapacityObjects(t *testing.T, ctx context.Context, class string) *capacityArrivals {
	t.Helper()
	w, err := client.StorageV1().CSIStorageCapacities(lab.CapacityNamespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	a := &capacityArrivals{at: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*storagev1.CSIStorageCapacity)
			if !ok || ev.Type != watch.Added || c.StorageClassName != class || c.NodeTopology == nil {
				continue
			}
			node := c.NodeTopology.MatchLabels[v1.LabelHostname]
			a.mu.Lock()
			if _, ok := a.at[node]; !ok {
				a.at[node] = time.Now()
			}
			a.mu.Unlock()
		}
	}()
	return a
}
