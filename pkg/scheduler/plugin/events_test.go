package plugin

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// TestEventsToRegister: the plugin names the events that can lift its
// rejections, never a wildcard, and no Node status or condition update.
func TestEventsToRegister(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	events, err := (&Plugin{}).EventsToRegister(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[fwk.EventResource]fwk.ActionType{}
	for _, e := range events {
		if e.Event.Resource == fwk.WildCard {
			t.Errorf("wildcard registration %v", e.Event)
		}
		got[e.Event.Resource] |= e.Event.ActionType
	}
	for res, want := range map[fwk.EventResource]fwk.ActionType{
		fwk.PersistentVolumeClaim: fwk.Add | fwk.Update | fwk.Delete,
		fwk.PersistentVolume:      fwk.Add | fwk.Update,
		fwk.Node:                  fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable,
		fwk.CSINode:               fwk.Add | fwk.Update,
		fwk.CSIStorageCapacity:    fwk.Add | fwk.Update,
		fwk.StorageClass:          fwk.Add,
		fwk.Pod:                   fwk.Delete,
		fwk.VolumeAttachment:      fwk.Delete,
	} {
		if got[res] != want {
			t.Errorf("%s: registered %v, want %v", res, got[res], want)
		}
	}
	if got[fwk.Node]&(fwk.UpdateNodeCondition|fwk.UpdateNodeTaint|fwk.UpdateNodeAnnotation) != 0 {
		t.Errorf("Node status updates requeue the pod: %v", got[fwk.Node])
	}
}

func TestQueueingHints(t *testing.T) {
	store := func(objs ...runtime.Object) cache.Indexer { return storeOf(t, objs...) }
	ours := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: driver}
	theirs := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "other.example.com"}
	csiPV := func(name, drv string) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: name}}}}
	}
	core, err := scheduler.New(scheduler.Config{Driver: driver}, scheduler.Listers{
		Claims:   corelisters.NewPersistentVolumeClaimLister(store()),
		Volumes:  corelisters.NewPersistentVolumeLister(store(csiPV("pv-ours", driver), csiPV("pv-theirs", "other.example.com"))),
		Classes:  storagelisters.NewStorageClassLister(store(ours, theirs)),
		CSINodes: storagelisters.NewCSINodeLister(store()),
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{core: core}
	logger, _ := ktesting.NewTestContext(t)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "d",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	claim := func(ns, name, class, volume string) *v1.PersistentVolumeClaim {
		c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: volume}}
		if class != "" {
			c.Spec.StorageClassName = ptr.To(class)
		}
		return c
	}
	csiNode := func(drivers ...storagev1.CSINodeDriver) *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{Drivers: drivers}}
	}
	entry := storagev1.CSINodeDriver{Name: driver, NodeID: "n1", TopologyKeys: []string{"zone"}}
	limited := entry
	limited.Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To[int32](4)}
	other := storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "n1"}
	capacity := func(class string) *storagev1.CSIStorageCapacity {
		return &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: "csi", Name: "c-" + class}, StorageClassName: class}
	}
	onNode := func(node string, vols ...v1.Volume) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone"}, Spec: v1.PodSpec{NodeName: node, Volumes: vols}}
	}
	withClaim := v1.Volume{Name: "d", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}}
	emptyDir := v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	attachment := func(attacher string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: "n1"}}
	}

	for _, tc := range []struct {
		name     string
		fn       fwk.QueueingHintFn
		old, new any
		want     fwk.QueueingHint
	}{
		{name: "the pod's own claim created", fn: p.afterClaimChange, new: claim("ns", "data", "", ""), want: fwk.Queue},
		{name: "a claim of the same name elsewhere", fn: p.afterClaimChange, new: claim("other", "data", "", ""), want: fwk.QueueSkip},
		{name: "a claim of the driver's class bound", fn: p.afterClaimChange, old: claim("x", "c", "fast", ""), new: claim("x", "c", "fast", "pv-ours"), want: fwk.Queue},
		{name: "a claim of the driver's class deleted", fn: p.afterClaimChange, old: claim("x", "c", "fast", ""), want: fwk.Queue},
		{name: "a claim of the driver's class deleted, tombstone", fn: p.afterClaimChange, old: cache.DeletedFinalStateUnknown{Key: "x/c", Obj: claim("x", "c", "fast", "")}, want: fwk.Queue},
		{name: "a claim of another driver's class", fn: p.afterClaimChange, new: claim("x", "c", "other", ""), want: fwk.QueueSkip},
		{name: "a static claim bound to the driver's PV", fn: p.afterClaimChange, new: claim("x", "c", "", "pv-ours"), want: fwk.Queue},
		{name: "a static claim bound to another driver's PV", fn: p.afterClaimChange, new: claim("x", "c", "", "pv-theirs"), want: fwk.QueueSkip},
		{name: "not a claim", fn: p.afterClaimChange, new: &v1.Pod{}, want: fwk.Queue},
		{name: "a PV of the driver", fn: p.afterVolumeChange, new: csiPV("pv-new", driver), want: fwk.Queue},
		{name: "a PV of another driver", fn: p.afterVolumeChange, new: csiPV("pv-new", "other.example.com"), want: fwk.QueueSkip},
		{name: "a CSINode with the driver created", fn: p.afterCSINodeChange, new: csiNode(entry), want: fwk.Queue},
		{name: "a CSINode without the driver created", fn: p.afterCSINodeChange, new: csiNode(other), want: fwk.QueueSkip},
		{name: "the driver registers", fn: p.afterCSINodeChange, old: csiNode(other), new: csiNode(other, entry), want: fwk.Queue},
		{name: "the driver's attach limit changes", fn: p.afterCSINodeChange, old: csiNode(entry), new: csiNode(limited), want: fwk.Queue},
		{name: "the driver goes", fn: p.afterCSINodeChange, old: csiNode(entry), new: csiNode(), want: fwk.Queue},
		{name: "another driver registers", fn: p.afterCSINodeChange, old: csiNode(entry), new: csiNode(entry, other), want: fwk.QueueSkip},
		{name: "capacity of the driver's class", fn: p.afterCapacityChange, new: capacity("fast"), want: fwk.Queue},
		{name: "capacity of a class not known yet", fn: p.afterCapacityChange, new: capacity("coming"), want: fwk.Queue},
		{name: "capacity of another driver's class", fn: p.afterCapacityChange, new: capacity("other"), want: fwk.QueueSkip},
		{name: "a class of the driver", fn: p.afterClassAdd, new: ours, want: fwk.Queue},
		{name: "a class of another driver", fn: p.afterClassAdd, new: theirs, want: fwk.QueueSkip},
		{name: "a pod with a claim leaves its node", fn: p.afterPodDelete, old: onNode("n1", emptyDir, withClaim), want: fwk.Queue},
		{name: "a pod without volumes of a claim leaves its node", fn: p.afterPodDelete, old: onNode("n1", emptyDir), want: fwk.QueueSkip},
		{name: "a pending pod is deleted", fn: p.afterPodDelete, old: onNode("", withClaim), want: fwk.QueueSkip},
		{name: "an attachment of the driver deleted", fn: p.afterAttachmentDelete, old: attachment(driver), want: fwk.Queue},
		{name: "an attachment of another driver deleted", fn: p.afterAttachmentDelete, old: attachment("other.example.com"), want: fwk.QueueSkip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(logger, pod, tc.old, tc.new)
			if got != tc.want {
				t.Errorf("hint %v (err %v), want %v", got, err, tc.want)
			}
		})
	}
}

// TestCSINodeHintDropsSegment: the CSINode hint drops the node's cached
// segment before it queues the pod, so the pod's next cycle reads the new
// entry even if the Core's own CSINode handler has not run yet.
func TestCSINodeHintDropsSegment(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: driver,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast")}}
	other := storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "n1"}
	entry := storagev1.CSINodeDriver{Name: driver, NodeID: "n1", TopologyKeys: []string{"zone"}}
	csiNode := func(drivers ...storagev1.CSINodeDriver) *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{Drivers: drivers}}
	}
	csiNodes := storeOf(t, csiNode(other))
	core, err := scheduler.New(scheduler.Config{Driver: driver, CSINodeEvents: true}, scheduler.Listers{
		Claims:   corelisters.NewPersistentVolumeClaimLister(storeOf(t, claim)),
		Volumes:  corelisters.NewPersistentVolumeLister(storeOf(t)),
		Classes:  storagelisters.NewStorageClassLister(storeOf(t, class)),
		CSINodes: storagelisters.NewCSINodeLister(csiNodes),
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{core: core}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "d",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	n1 := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "z1"}}}
	podVols, err := core.PodVolumes(pod)
	if err != nil {
		t.Fatal(err)
	}
	if st := core.Filter(podVols, n1); st == nil || st.Reason != scheduler.ReasonDriverNotRegistered {
		t.Fatalf("before the driver registers: %v, want %s", st, scheduler.ReasonDriverNotRegistered)
	}
	registered := csiNode(other, entry)
	if err := csiNodes.Update(registered); err != nil {
		t.Fatal(err)
	}
	if h, err := p.afterCSINodeChange(logger, pod, csiNode(other), registered); err != nil || h != fwk.Queue {
		t.Fatalf("hint %v, %v; want Queue", h, err)
	}
	if st := core.Filter(podVols, n1); st != nil {
		t.Errorf("after the hint: %v, want the node to fit", st)
	}
}
