package explain

import (
	"context"
	"fmt"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
)

// pageSize is the page of every list: a 5 000-node cluster is read in ten
// pages of nodes and ten of CSINodes, never one GET per node.
const pageSize = 500

// Denied is a read that RBAC refused.
type Denied struct {
	// What could not be read, e.g. "list nodes (cluster-wide)".
	What string `json:"what"`
	// Rule is the RBAC rule that would allow it.
	Rule string `json:"rule"`
}

// snapshot is everything one explanation reads.
type snapshot struct {
	claim *v1.PersistentVolumeClaim
	// pods use the claim (the pod asked about, or the namespace's pods
	// that mount the claim).
	pods   []*v1.Pod
	class  *storagev1.StorageClass
	volume *v1.PersistentVolume
	// source is the claim a clone copies or a restored snapshot was taken
	// of, sourceVolume its PV; snapshot is the VolumeSnapshot a restore
	// names (nil: not a restore, not found, or not read).
	snapshot     *snapv1.VolumeSnapshot
	source       *v1.PersistentVolumeClaim
	sourceVolume *v1.PersistentVolume
	nodes        []*v1.Node
	csiNodes     []*storagev1.CSINode
	capacities   []*storagev1.CSIStorageCapacity
	heartbeats   []*coordinationv1.Lease
	leader       *coordinationv1.Lease
	events       []v1.Event
	// nsClaims are the claims of the claim's namespace; allPods,
	// allClaims and attachments feed the attach-limit count (nil when
	// they could not be listed).
	nsClaims    []*v1.PersistentVolumeClaim
	allPods     []*v1.Pod
	allClaims   []*v1.PersistentVolumeClaim
	attachments []*storagev1.VolumeAttachment
	classes     []*storagev1.StorageClass
	volumes     []*v1.PersistentVolume
	denied      []Denied
	// read records which optional reads succeeded.
	read map[string]bool
}

// reader reads a snapshot through a client, recording refused reads.
type reader struct {
	client kubernetes.Interface
	opts   Options
	s      *snapshot
}

// deny records a Forbidden error and reports whether err was one; other
// errors are returned wrapped.
func (r *reader) deny(err error, what, rule string) (bool, error) {
	if err == nil {
		r.s.read[what] = true
		return false, nil
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		r.s.denied = append(r.s.denied, Denied{What: what, Rule: rule})
		return true, nil
	}
	return false, fmt.Errorf("%s: %w", what, err)
}

// listAll pages through a list, calling add for each item.
func listAll(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), opts metav1.ListOptions, add func(runtime.Object)) error {
	p := pager.New(pager.ListPageFunc(list))
	p.PageSize = pageSize
	return p.EachListItem(ctx, opts, func(obj runtime.Object) error {
		add(obj)
		return nil
	})
}

func rule(group, resource, verb string) string {
	return fmt.Sprintf("apiGroups: [%q], resources: [%q], verbs: [%q]", group, resource, verb)
}

// readCluster reads the cluster-wide objects: nodes, CSINodes, capacities,
// Leases and what the attach-limit count needs.
func (r *reader) readCluster(ctx context.Context) error {
	c := r.client
	steps := []struct {
		what, rule string
		list       func(context.Context, metav1.ListOptions) (runtime.Object, error)
		opts       metav1.ListOptions
		add        func(runtime.Object)
	}{
		{readNodes, rule("", "nodes", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.CoreV1().Nodes().List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) { r.s.nodes = append(r.s.nodes, o.(*v1.Node)) }},
		{readCSINodes, rule("storage.k8s.io", "csinodes", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.StorageV1().CSINodes().List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) { r.s.csiNodes = append(r.s.csiNodes, o.(*storagev1.CSINode)) }},
		{readCapacities, rule("storage.k8s.io", "csistoragecapacities", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.StorageV1().CSIStorageCapacities("").List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) {
				r.s.capacities = append(r.s.capacities, o.(*storagev1.CSIStorageCapacity))
			}},
		{readHeartbeats, rule("coordination.k8s.io", "leases", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.CoordinationV1().Leases(r.opts.HeartbeatNamespace).List(ctx, o)
			},
			heartbeatOptions(), func(o runtime.Object) { r.s.heartbeats = append(r.s.heartbeats, o.(*coordinationv1.Lease)) }},
		{readClasses, rule("storage.k8s.io", "storageclasses", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.StorageV1().StorageClasses().List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) { r.s.classes = append(r.s.classes, o.(*storagev1.StorageClass)) }},
		{readVolumes, rule("", "persistentvolumes", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.CoreV1().PersistentVolumes().List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) { r.s.volumes = append(r.s.volumes, o.(*v1.PersistentVolume)) }},
		{readPods, rule("", "pods", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.CoreV1().Pods("").List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) { r.s.allPods = append(r.s.allPods, o.(*v1.Pod)) }},
		{readClaims, rule("", "persistentvolumeclaims", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.CoreV1().PersistentVolumeClaims("").List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) {
				r.s.allClaims = append(r.s.allClaims, o.(*v1.PersistentVolumeClaim))
			}},
		{readAttachments, rule("storage.k8s.io", "volumeattachments", "list"),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.StorageV1().VolumeAttachments().List(ctx, o)
			},
			metav1.ListOptions{}, func(o runtime.Object) {
				r.s.attachments = append(r.s.attachments, o.(*storagev1.VolumeAttachment))
			}},
	}
	for _, st := range steps {
		if _, err := r.deny(listAll(ctx, st.list, st.opts, st.add), st.what, st.rule); err != nil {
			return err
		}
	}
	return r.readLeader(ctx)
}

func heartbeatOptions() metav1.ListOptions {
	var o metav1.ListOptions
	heartbeat.LeaseListOptions(&o)
	return o
}

// readLeader finds the leader Lease by name, in Options.LeaseNamespace or
// in every namespace; the most recently renewed one wins.
func (r *reader) readLeader(ctx context.Context) error {
	name := contract.LeaderLeaseName(r.s.class.Provisioner)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	list, err := r.client.CoordinationV1().Leases(r.opts.LeaseNamespace).List(ctx, opts)
	where := "all namespaces"
	if r.opts.LeaseNamespace != "" {
		where = "namespace " + r.opts.LeaseNamespace
	}
	if denied, err := r.deny(err, "list leader lease "+name+" ("+where+")", rule("coordination.k8s.io", "leases", "list")); denied || err != nil {
		return err
	}
	items := list.Items[:0]
	for _, l := range list.Items {
		if l.Name == name {
			items = append(items, l)
		}
	}
	list.Items = items
	sort.Slice(list.Items, func(i, j int) bool { return renewed(&list.Items[i]).After(renewed(&list.Items[j]).Time) })
	if len(list.Items) > 0 {
		r.s.leader = &list.Items[0]
	}
	return nil
}

func renewed(l *coordinationv1.Lease) (t metav1.MicroTime) {
	if l.Spec.RenewTime != nil {
		return *l.Spec.RenewTime
	}
	if l.Spec.AcquireTime != nil {
		return *l.Spec.AcquireTime
	}
	return t
}

// Reads whose success changes what the scheduler core checks.
const (
	readCapacities  = "list csistoragecapacities (all namespaces)"
	readHeartbeats  = "list heartbeat leases"
	readNodes       = "list nodes (cluster-wide)"
	readCSINodes    = "list csinodes (cluster-wide)"
	readAttachments = "list volumeattachments (cluster-wide, for the attach-limit count)"
	readClaims      = "list persistentvolumeclaims (all namespaces, for the attach-limit count)"
	readPods        = "list pods (all namespaces, for the attach-limit count)"
	readVolumes     = "list persistentvolumes (cluster-wide, for the attach-limit count and the claim's PV before it is bound)"
	readClasses     = "list storageclasses"
	readSnapshot    = "get the volumesnapshot the claim restores"
)
