package explain

import (
	"context"
	"errors"
	"fmt"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"sort"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// ErrNotFound is returned when the claim or pod asked about does not exist.
var ErrNotFound = errors.New("not found")

// readClaim reads the claim and what hangs on it in its namespace: its pods,
// the namespace's claims (for a clone's source), its class, its PV, its
// source's PV and its Events.
func (r *reader) readClaim(ctx context.Context, ns, name string) error {
	c := r.client
	claim, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("persistentvolumeclaim %s/%s: %w", ns, name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("reading claim %s/%s: %w", ns, name, err)
	}
	r.s.claim = claim
	if err := r.readNamespace(ctx, ns); err != nil {
		return err
	}
	if class := claimClass(claim); class != "" {
		sc, err := c.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			if _, err := r.deny(err, "get storageclass "+class, rule("storage.k8s.io", "storageclasses", "get")); err != nil {
				return err
			}
		default:
			r.s.class = sc
		}
	}
	if claim.Spec.VolumeName != "" {
		r.s.volume, err = r.getVolume(ctx, claim.Spec.VolumeName)
		if err != nil {
			return err
		}
	}
	src := cloneSource(claim)
	if snap := restoreSource(claim); snap != "" && r.opts.Snapshots != nil {
		if src, err = r.readSnapshot(ctx, ns, snap); err != nil {
			return err
		}
	}
	if src != "" {
		for _, cl := range r.s.nsClaims {
			if cl.Name == src {
				r.s.source = cl
			}
		}
		if r.s.source != nil && r.s.source.Spec.VolumeName != "" {
			if r.s.sourceVolume, err = r.getVolume(ctx, r.s.source.Spec.VolumeName); err != nil {
				return err
			}
		}
	}
	return r.readEvents(ctx, claim)
}

func (r *reader) getVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	pv, err := r.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if _, err := r.deny(err, "get persistentvolume "+name, rule("", "persistentvolumes", "get")); err != nil {
		return nil, err
	}
	return pv, nil
}

// readNamespace lists the namespace's claims and, unless the pod asked about
// is known, the pods that mount the claim.
func (r *reader) readNamespace(ctx context.Context, ns string) error {
	c := r.client
	err := listAll(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().PersistentVolumeClaims(ns).List(ctx, o)
	}, metav1.ListOptions{}, func(o runtime.Object) { r.s.nsClaims = append(r.s.nsClaims, o.(*v1.PersistentVolumeClaim)) })
	if _, err := r.deny(err, "list persistentvolumeclaims in "+ns, rule("", "persistentvolumeclaims", "list")); err != nil {
		return err
	}
	if len(r.s.pods) > 0 {
		return nil
	}
	var pods []*v1.Pod
	err = listAll(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Pods(ns).List(ctx, o)
	}, metav1.ListOptions{}, func(o runtime.Object) {
		if p := o.(*v1.Pod); usesClaim(p, r.s.claim.Name) && p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	})
	if _, err := r.deny(err, "list pods in "+ns, rule("", "pods", "list")); err != nil {
		return err
	}
	r.s.pods = pods
	return nil
}

// readEvents lists the claim's Events (by its UID), oldest first.
func (r *reader) readEvents(ctx context.Context, claim *v1.PersistentVolumeClaim) error {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(claim.UID)).String()}
	err := listAll(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return r.client.CoreV1().Events(claim.Namespace).List(ctx, o)
	}, opts, func(o runtime.Object) {
		if ev := o.(*v1.Event); ev.InvolvedObject.UID == claim.UID {
			r.s.events = append(r.s.events, *ev)
		}
	})
	if _, err := r.deny(err, "list events in "+claim.Namespace, rule("", "events", "list")); err != nil {
		return err
	}
	sort.SliceStable(r.s.events, func(i, j int) bool {
		ti, tj := eventTime(r.s.events[i]), eventTime(r.s.events[j])
		return ti.Before(&tj)
	})
	return nil
}

func eventTime(e v1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.NewTime(e.EventTime.Time)
	}
	return e.CreationTimestamp
}

func claimClass(c *v1.PersistentVolumeClaim) string {
	if c.Spec.StorageClassName != nil {
		return *c.Spec.StorageClassName
	}
	return c.Annotations[v1.BetaStorageClassAnnotation]
}

// cloneSource is the name of the claim a claim clones, "" when none.
func cloneSource(c *v1.PersistentVolumeClaim) string {
	if ref := c.Spec.DataSourceRef; ref != nil && ref.Kind == "PersistentVolumeClaim" && (ref.APIGroup == nil || *ref.APIGroup == "") {
		return ref.Name
	}
	if ds := c.Spec.DataSource; ds != nil && ds.Kind == "PersistentVolumeClaim" && (ds.APIGroup == nil || *ds.APIGroup == "") {
		return ds.Name
	}
	return ""
}

// restoreSource is the VolumeSnapshot a claim restores, or "".
func restoreSource(c *v1.PersistentVolumeClaim) string {
	if ref := c.Spec.DataSourceRef; ref != nil && ref.Kind == "VolumeSnapshot" && ref.APIGroup != nil && *ref.APIGroup == snapv1.GroupName {
		return ref.Name
	}
	if ds := c.Spec.DataSource; ds != nil && ds.Kind == "VolumeSnapshot" && ds.APIGroup != nil && *ds.APIGroup == snapv1.GroupName {
		return ds.Name
	}
	return ""
}

// readSnapshot reads a restore's VolumeSnapshot and returns the claim it
// was taken of ("" when unknown).
func (r *reader) readSnapshot(ctx context.Context, ns, name string) (string, error) {
	snap, err := r.opts.Snapshots.SnapshotV1().VolumeSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.s.read[readSnapshot] = true
		return "", nil
	}
	if denied, err := r.deny(err, readSnapshot, rule(snapv1.GroupName, "volumesnapshots", "get")); denied || err != nil {
		return "", err
	}
	r.s.snapshot = snap
	if c := snap.Spec.Source.PersistentVolumeClaimName; c != nil {
		return *c, nil
	}
	return "", nil
}

func usesClaim(p *v1.Pod, claim string) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

// driverEntry returns the CSINode's entry for driver, nil when none.
func driverEntry(n *storagev1.CSINode, driver string) *storagev1.CSINodeDriver {
	if n == nil {
		return nil
	}
	for i := range n.Spec.Drivers {
		if n.Spec.Drivers[i].Name == driver {
			return &n.Spec.Drivers[i]
		}
	}
	return nil
}
