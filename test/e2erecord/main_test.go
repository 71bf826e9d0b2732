// Package e2erecord reproduces, on the local control plane with the real
// csi-provisioner and the mock driver, the volume leaks of upstream
// external-provisioner that the durable in-flight record closes (#486,
// #1469, #1437), and measures what the record costs in API requests.
//
// Each reproduction passes with the record and fails without it:
//
//	go test ./test/e2erecord/ -run TestUpstream -args -in-flight-record=false
package e2erecord

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	driverName = lab.DriverName
	timeout    = 90 * time.Second
	// provisionerRole is the ClusterRole of deploy/kubernetes/base.
	provisionerRole = "csi-topology-provisioner"
)

// inFlightRecord is passed to csi-provisioner as --in-flight-record; false
// shows the upstream leaks.
var inFlightRecord = flag.Bool("in-flight-record", true, "run csi-provisioner with --in-flight-record=<this>; false must make the TestUpstream* reproductions fail")

var (
	env    *lab.Lab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{}, func(ctx context.Context, c *controlplane.Cluster) error {
		var err error
		env, err = lab.Setup(ctx, c, lab.Config{Zones: []string{"z1", "z2"}, NodesPerZone: 1, CapacityBytes: 100 << 30,
			ProvisionerArgs: []string{fmt.Sprintf("--in-flight-record=%t", *inFlightRecord)}})
		client = c.Client
		return err
	}))
}

// driverVolumes returns the mock driver's volumes named name.
func driverVolumes(t *testing.T, ctx context.Context, name string) []state.Volume {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(vols, func(v state.Volume) bool { return v.Name != name })
}

// waitVolume waits until the driver has a volume named name.
func waitVolume(t *testing.T, ctx context.Context, name string) state.Volume {
	t.Helper()
	var got []state.Volume
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		got = driverVolumes(t, ctx, name)
		return len(got) > 0, nil
	}); err != nil {
		t.Fatalf("the driver never created volume %s: %v", name, err)
	}
	return got[0]
}

// waitCreated waits until the driver has answered a CreateVolume of name
// with a volume, and returns its ID (the volume may be gone again).
func waitCreated(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	id := ""
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		reqs, err := env.CreateRequests(ctx)
		if err != nil {
			return false, err
		}
		for _, r := range reqs {
			if r.Name == name && r.Code == "OK" {
				id = r.Result
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the driver never answered a CreateVolume of %s with a volume: %v", name, err)
	}
	return id
}

// leakedVolumes returns the driver's volumes named name that no PV of the
// driver refers to.
func leakedVolumes(ctx context.Context, name string) ([]state.Volume, error) {
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	handles := map[string]bool{}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == driverName {
			handles[pv.Spec.CSI.VolumeHandle] = true
		}
	}
	vols, err := env.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(vols, func(v state.Volume) bool { return v.Name != name || handles[v.ID] }), nil
}

// waitNoLeak waits until every driver volume named name has a PV; it fails
// the test (a leaked volume) otherwise.
func waitNoLeak(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var leaked []state.Volume
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		l, err := leakedVolumes(ctx, name)
		if err != nil {
			return false, nil
		}
		leaked = l
		return len(leaked) == 0, nil
	})
	if err != nil {
		t.Fatalf("LEAK: after %s the driver keeps %d volume(s) named %s without a PV: %+v (csi-provisioner --in-flight-record=%t)",
			timeout, len(leaked), name, leaked, *inFlightRecord)
	}
}

// setPVCreate grants (true) or revokes (false) csi-provisioner's right to
// create PVs, which holds a provision between CreateVolume and the PV: the
// library retries the PV create in memory.
func setPVCreate(t *testing.T, ctx context.Context, allow bool) {
	t.Helper()
	role, err := client.RbacV1().ClusterRoles().Get(ctx, provisionerRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range role.Rules {
		if !slices.Contains(r.Resources, "persistentvolumes") {
			continue
		}
		verbs := slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "create" })
		if allow {
			verbs = append(verbs, "create")
		}
		role.Rules[i] = rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: verbs}
	}
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// events returns the reasons of the Events of namespace ns.
func eventReasons(t *testing.T, ctx context.Context, ns string) []string {
	t.Helper()
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason)
	}
	return out
}
