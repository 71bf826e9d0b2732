package e2esource

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

const timeout = 2 * time.Minute

// setup makes a namespace (and its WaitForFirstConsumer class, of the same
// name) for a test.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ns := strings.ToLower("s-" + strings.ReplaceAll(t.Name(), "/", "-"))
	env.NamespaceWithClass(t, ctx, ns)
	return ctx, ns
}

// immediateClass creates an immediate-binding class of the mock driver,
// optionally limited to one zone.
func immediateClass(t *testing.T, ctx context.Context, name, zone string) string {
	t.Helper()
	mode := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: lab.DriverName, VolumeBindingMode: &mode}
	if zone != "" {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: lab.ZoneKey, Values: []string{zone}}}}}
	}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	return name
}

// claim creates a claim of class and size, changed by mutate.
func claim(t *testing.T, ctx context.Context, ns, name, class, size string, mutate func(*v1.PersistentVolumeClaim)) {
	t.Helper()
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}}},
	}
	if mutate != nil {
		mutate(c)
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func cloneOf(src string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src}
	}
}

func restoreOf(snap string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		g := "snapshot.storage.k8s.io"
		c.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: &g, Kind: "VolumeSnapshot", Name: snap}
	}
}

// waitBound waits for the claim to be Bound and returns its PV.
func waitBound(t *testing.T, ctx context.Context, ns, name string) *v1.PersistentVolume {
	t.Helper()
	var pv *v1.PersistentVolume
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || c.Status.Phase != v1.ClaimBound {
			return false, nil
		}
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("claim %s/%s not bound: %v (events: %s)", ns, name, err, events(ctx, ns, name))
	}
	return pv
}

// events lists the claim's Events as "type reason: message" lines.
func events(ctx context.Context, ns, name string) string {
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	return strings.Join(out, "\n")
}

// waitEvent waits for an Event on the claim whose "type reason: message"
// line contains every one of want, and returns it.
func waitEvent(t *testing.T, ctx context.Context, ns, name string, want ...string) string {
	t.Helper()
	var found string
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		for line := range strings.SplitSeq(events(ctx, ns, name), "\n") {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				found = line
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no Event on %s/%s saying %q: %v\nevents:\n%s", ns, name, want, err, events(ctx, ns, name))
	}
	return found
}

// volume returns the mock's volume with the handle.
func volume(t *testing.T, ctx context.Context, handle string) state.Volume {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == handle {
			return v
		}
	}
	t.Fatalf("the mock driver has no volume %q", handle)
	return state.Volume{}
}

// volumeCount is the number of volumes the mock driver has.
func volumeCount(t *testing.T, ctx context.Context) int {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(vols)
}

// createSnapshot calls the mock driver's CreateSnapshot, as the
// external-snapshotter sidecar would.
func createSnapshot(t *testing.T, ctx context.Context, name, volumeHandle string) *csi.Snapshot {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+env.ControllerSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeHandle})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	return resp.GetSnapshot()
}

func hasFinalizer(list []string, f string) bool {
	for _, x := range list {
		if x == f {
			return true
		}
	}
	return false
}
