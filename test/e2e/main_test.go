package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	zoneKey    = lab.ZoneKey
	rackKey    = lab.RackKey
	driverName = lab.DriverName
	gi         = int64(1) << 30
	timeout    = 90 * time.Second
)

var (
	env    *lab.Lab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(lab.RunTestMain(m, controlplane.Options{}, lab.ZonesAndRacks(), func(_ context.Context, l *lab.Lab) error {
		env, client = l, l.Cluster.Client
		return nil
	}))
}

// affinityZones returns the zones a PV's node affinity allows.
func affinityZones(pv *v1.PersistentVolume) []string {
	var zones []string
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == zoneKey {
				zones = append(zones, e.Values...)
			}
		}
	}
	return zones
}

// volumeOf returns the mock driver's volume behind a PV.
func volumeOf(t *testing.T, ctx context.Context, pv *v1.PersistentVolume) state.Volume {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == pv.Spec.CSI.VolumeHandle {
			return v
		}
	}
	t.Fatalf("driver has no volume %s for PV %s", pv.Spec.CSI.VolumeHandle, pv.Name)
	return state.Volume{}
}

// namespaceVolumes counts the driver's volumes of the claims of namespace ns
// (a volume's name carries its claim's UID), so that volumes of other tests,
// still being deleted, do not count.
func namespaceVolumes(ctx context.Context, ns string) (int, error) {
	claims, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	vols, err := env.Volumes(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vols {
		for _, c := range claims.Items {
			if strings.HasSuffix(v.Name, string(c.UID)) {
				n++
				break
			}
		}
	}
	return n, nil
}

// mustNamespaceVolumes is namespaceVolumes that fails the test on error.
func mustNamespaceVolumes(t *testing.T, ctx context.Context, ns string) int {
	t.Helper()
	n, err := namespaceVolumes(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitExactlyOnce waits until the claims data-0 .. data-<n-1> of ns are
// Bound, each to its own volume, and checks the driver has exactly n
// volumes of the claims of ns: every claim provisioned once, nothing leaked.
// Volumes of other tests, still being deleted, do not count.
func waitExactlyOnce(t *testing.T, ctx context.Context, ns string, n int) {
	t.Helper()
	handles := map[string]bool{}
	for i := 0; i < n; i++ {
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i))
		if handles[pv.Spec.CSI.VolumeHandle] {
			t.Errorf("volume %s bound twice", pv.Spec.CSI.VolumeHandle)
		}
		handles[pv.Spec.CSI.VolumeHandle] = true
	}
	if got := mustNamespaceVolumes(t, ctx, ns); got != n {
		t.Errorf("the driver has %d volumes of the claims of %s, want exactly %d (no duplicates, no orphans)", got, ns, n)
	}
}
