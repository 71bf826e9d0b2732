package explain

import (
	"fmt"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// store is an informer that never runs: the indexes the scheduler core and
// the attach-limit count expect are added to it, then the listed objects.
func store(example runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(&cache.ListWatch{}, example, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

func fill[T runtime.Object](inf cache.SharedIndexInformer, items []T) error {
	for _, it := range items {
		if err := inf.GetIndexer().Add(it); err != nil {
			return fmt.Errorf("indexing: %w", err)
		}
	}
	return nil
}

// stores are the filled stores of one explanation.
type stores struct {
	claims, volumes, classes, csiNodes, nodes, capacities, leases, pods, attachments cache.SharedIndexInformer
}

// newStores fills the stores from the snapshot.
func newStores(s *snapshot) (*stores, error) {
	st := &stores{
		claims: store(&v1.PersistentVolumeClaim{}), volumes: store(&v1.PersistentVolume{}),
		classes: store(&storagev1.StorageClass{}), csiNodes: store(&storagev1.CSINode{}), nodes: store(&v1.Node{}),
		capacities: store(&storagev1.CSIStorageCapacity{}), leases: store(&coordinationv1.Lease{}),
		pods: store(&v1.Pod{}), attachments: store(&storagev1.VolumeAttachment{}),
	}
	if err := limits.AddIndexers(st.pods, st.claims, st.attachments); err != nil {
		return nil, err
	}
	if err := heartbeat.AddLeaseIndexer(st.leases); err != nil {
		return nil, err
	}
	claims := s.allClaims
	if !s.read[readClaims] {
		claims = s.nsClaims
	}
	volumes := s.volumes
	if !s.read[readVolumes] {
		for _, pv := range []*v1.PersistentVolume{s.volume, s.sourceVolume} {
			if pv != nil {
				volumes = append(volumes, pv)
			}
		}
	}
	classes := s.classes
	if !s.read[readClasses] && s.class != nil {
		classes = []*storagev1.StorageClass{s.class}
	}
	for _, err := range []error{fill(st.claims, claims), fill(st.volumes, volumes), fill(st.classes, classes),
		fill(st.csiNodes, s.csiNodes), fill(st.nodes, s.nodes), fill(st.leases, s.heartbeats),
		fill(st.pods, s.allPods), fill(st.attachments, s.attachments)} {
		if err != nil {
			return nil, err
		}
	}
	return st, nil
}

// newCore builds the scheduler filter's core on the stores: capacity when
// capacities were read, liveness when heartbeats were, the attach-limit
// count when pods, claims, PVs and VolumeAttachments of the whole cluster
// were.
func newCore(s *snapshot, st *stores, now time.Time) (*scheduler.Core, *heartbeat.Liveness, *limits.Counter, scheduler.CapacitySource, error) {
	caps, err := scheduler.NewCapacitySource(st.capacities)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("capacity source: %w", err)
	}
	if err := fill(st.capacities, s.capacities); err != nil {
		return nil, nil, nil, nil, err
	}
	live, err := heartbeat.NewLiveness(st.leases.GetIndexer())
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("liveness: %w", err)
	}
	l := scheduler.Listers{
		Claims:   corelisters.NewPersistentVolumeClaimLister(st.claims.GetIndexer()),
		Volumes:  corelisters.NewPersistentVolumeLister(st.volumes.GetIndexer()),
		Classes:  storagelisters.NewStorageClassLister(st.classes.GetIndexer()),
		CSINodes: storagelisters.NewCSINodeLister(st.csiNodes.GetIndexer()),
	}
	if s.read[readCapacities] {
		l.Capacities = caps
	}
	if s.read[readHeartbeats] {
		l.Liveness = live
	}
	if s.read[readSnapshot] {
		snaps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if s.snapshot != nil {
			if err := snaps.Add(s.snapshot); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("indexing: %w", err)
			}
		}
		l.Snapshots = scheduler.NewSnapshotSource(snaplisters.NewVolumeSnapshotLister(snaps))
	}
	var counter *limits.Counter
	if s.read[readPods] && s.read[readClaims] && s.read[readAttachments] && s.read[readVolumes] && s.read[readClasses] {
		counter = limits.NewCounter(s.class.Provisioner, limits.Stores{
			Pods: st.pods.GetIndexer(), Claims: st.claims.GetIndexer(), Attachments: st.attachments.GetIndexer(),
			Volumes: st.volumes.GetIndexer(), Classes: st.classes.GetIndexer(),
			Nodes: st.nodes.GetIndexer(), CSINodes: st.csiNodes.GetIndexer(),
		})
	}
	core, err := scheduler.New(scheduler.Config{Driver: s.class.Provisioner}, l, counter, func() time.Time { return now })
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("scheduler core: %w", err)
	}
	if l.Capacities == nil {
		caps = nil
	}
	if l.Liveness == nil {
		live = nil
	}
	return core, live, counter, caps, nil
}

// verdicts runs the scheduler filter for the claim's pod (or, when no pod
// uses it, a pod that only mounts the claim, built in memory) on every node
// the pod may go to by its own node selector and required node affinity.
// The map holds nil for a node that fits.
func verdicts(s *snapshot, core *scheduler.Core) (map[string]*scheduler.Status, error) {
	pod := probePod(s)
	podVols, err := core.PodVolumes(pod)
	if err != nil {
		return nil, fmt.Errorf("the pod's volumes: %w", err)
	}
	out := map[string]*scheduler.Status{}
	if podVols == nil {
		return out, nil
	}
	req := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, n := range s.nodes {
		if ok, _ := req.Match(n); !ok {
			continue
		}
		out[n.Name] = core.Filter(podVols, n)
	}
	return out, nil
}

// probePod is the first pod that uses the claim, or an in-memory pod that
// only mounts it.
func probePod(s *snapshot) *v1.Pod {
	if len(s.pods) > 0 {
		return s.pods[0]
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.claim.Namespace, Name: "explain-" + s.claim.Name, UID: "explain-" + s.claim.UID},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "claim", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: s.claim.Name}}}}},
	}
}
