package extender

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// The extender answers a node whose driver's heartbeat expired as failed
// and unresolvable, with the driver and its silence, for a pod with a
// pending claim; live nodes and nodes without a heartbeat fit.
func TestFilterDriverHeartbeat(t *testing.T) {
	const drv = "mock.csi.example.com"
	store := func(objs ...runtime.Object) cache.Indexer {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := idx.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return idx
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	cls := "fast"
	var csiNodes, nodes []runtime.Object
	for _, n := range []string{"live", "silent", "unknown"} {
		csiNodes = append(csiNodes, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: storagev1.CSINodeSpec{
			Drivers: []storagev1.CSINodeDriver{{Name: drv, NodeID: n}}}})
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	now := time.Now()
	lease := func(node string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "csi", Name: heartbeat.LeaseName(drv, node), Labels: map[string]string{heartbeat.LeaseDriverLabel: drv}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](4),
				RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	client := fake.NewClientset(lease("live", now), lease("silent", now.Add(-10*time.Minute)))
	factory, _, lv, err := scheduler.HeartbeatInformer(client, "csi")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	core, err := scheduler.New(scheduler.Config{Driver: drv}, scheduler.Listers{
		Claims: corelisters.NewPersistentVolumeClaimLister(store(&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "u1"},
			Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, Resources: v1.VolumeResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}})),
		Volumes:  corelisters.NewPersistentVolumeLister(store()),
		Classes:  storagelisters.NewStorageClassLister(store(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: cls}, Provisioner: drv, VolumeBindingMode: &mode})),
		CSINodes: storagelisters.NewCSINodeLister(store(csiNodes...)),
		Liveness: lv,
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	srv := serverWithNodes(t, core, corelisters.NewNodeLister(store(nodes...)))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "d",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	var res extenderv1.ExtenderFilterResult
	if code := post(t, srv.URL+"/filter", argsFor(pod, "live", "silent", "unknown"), &res); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if diff := cmp.Diff([]string{"live", "unknown"}, *res.NodeNames); diff != "" {
		t.Errorf("fitting nodes (-want +got):\n%s", diff)
	}
	want := "CSIDriverNotLive: CSI driver " + drv + " on node silent has not renewed its heartbeat for 10m"
	if msg := res.FailedAndUnresolvableNodes["silent"]; !strings.HasPrefix(msg, want) || len(res.FailedNodes) != 0 {
		t.Errorf("unresolvable %v, failed %v; want silent: %q", res.FailedAndUnresolvableNodes, res.FailedNodes, want)
	}
}
