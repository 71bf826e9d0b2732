package explain

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// clusterReads are the cluster-wide reads of one driver, shared by the
// claims a summary explains: they are read once per driver, not per claim.
type clusterReads struct {
	nodes       []*v1.Node
	csiNodes    []*storagev1.CSINode
	capacities  []*storagev1.CSIStorageCapacity
	heartbeats  []*coordinationv1.Lease
	leader      *coordinationv1.Lease
	allPods     []*v1.Pod
	allClaims   []*v1.PersistentVolumeClaim
	attachments []*storagev1.VolumeAttachment
	classes     []*storagev1.StorageClass
	volumes     []*v1.PersistentVolume
	read        []string
	denied      []Denied
}

// capture records what readCluster added to s: the reads that succeeded
// since before, and the refusals after the first deniedBefore.
func capture(s *snapshot, before map[string]bool, deniedBefore int) *clusterReads {
	c := &clusterReads{nodes: s.nodes, csiNodes: s.csiNodes, capacities: s.capacities, heartbeats: s.heartbeats,
		leader: s.leader, allPods: s.allPods, allClaims: s.allClaims, attachments: s.attachments, classes: s.classes,
		volumes: s.volumes, denied: append([]Denied(nil), s.denied[deniedBefore:]...)}
	for k := range s.read {
		if !before[k] {
			c.read = append(c.read, k)
		}
	}
	return c
}

// apply gives s the cluster reads of c.
func (c *clusterReads) apply(s *snapshot) {
	s.nodes, s.csiNodes, s.capacities, s.heartbeats, s.leader = c.nodes, c.csiNodes, c.capacities, c.heartbeats, c.leader
	s.allPods, s.allClaims, s.attachments, s.classes, s.volumes = c.allPods, c.allClaims, c.attachments, c.classes, c.volumes
	for _, k := range c.read {
		s.read[k] = true
	}
	s.denied = append(s.denied, c.denied...)
}

// Group is the Pending claims of a namespace that share a cause.
type Group struct {
	Cause Cause `json:"cause"`
	// Claims are their names, sorted.
	Claims []string `json:"claims"`
	// Conclusion is the first claim's conclusion.
	Conclusion string `json:"conclusion"`
}

// Summary groups the Pending claims of a namespace by cause.
type Summary struct {
	Namespace string `json:"namespace"`
	// Claims counts the namespace's claims, Pending those explained.
	Claims  int `json:"claims"`
	Pending int `json:"pending"`
	// Groups are the causes, the largest group first.
	Groups []Group `json:"groups"`
	// Reports are the explanations, one per Pending claim.
	Reports []*Report `json:"reports"`
}

// Namespace explains every Pending claim of a namespace and groups them by
// cause. The cluster-wide lists are read once per driver.
func Namespace(ctx context.Context, client kubernetes.Interface, namespace string, opts Options) (*Summary, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	var claims []*v1.PersistentVolumeClaim
	if err := listAll(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return client.CoreV1().PersistentVolumeClaims(namespace).List(ctx, o)
	}, metav1.ListOptions{}, func(o runtime.Object) { claims = append(claims, o.(*v1.PersistentVolumeClaim)) }); err != nil {
		return nil, fmt.Errorf("listing the claims of %s: %w", namespace, err)
	}
	sum := &Summary{Namespace: namespace, Claims: len(claims)}
	cache := map[string]*clusterReads{}
	byCause := map[Cause]*Group{}
	for _, c := range claims {
		if c.Status.Phase == v1.ClaimBound || c.DeletionTimestamp != nil {
			continue
		}
		r, err := explainCached(ctx, client, namespace, c.Name, nil, opts, cache)
		if err != nil {
			return nil, err
		}
		sum.Pending++
		sum.Reports = append(sum.Reports, r)
		g := byCause[r.Cause]
		if g == nil {
			g = &Group{Cause: r.Cause, Conclusion: r.Conclusion}
			byCause[r.Cause] = g
		}
		g.Claims = append(g.Claims, c.Name)
	}
	for _, g := range byCause {
		sort.Strings(g.Claims)
		sum.Groups = append(sum.Groups, *g)
	}
	sort.Slice(sum.Groups, func(i, j int) bool {
		if len(sum.Groups[i].Claims) != len(sum.Groups[j].Claims) {
			return len(sum.Groups[i].Claims) > len(sum.Groups[j].Claims)
		}
		return sum.Groups[i].Cause < sum.Groups[j].Cause
	})
	return sum, nil
}

// WriteSummary prints a summary: one line per cause with its claims and the
// first claim's conclusion.
func WriteSummary(w io.Writer, s *Summary) error {
	if _, err := fmt.Fprintf(w, "namespace %s: %d of %d claim(s) not bound\n", s.Namespace, s.Pending, s.Claims); err != nil {
		return err
	}
	for _, g := range s.Groups {
		if _, err := fmt.Fprintf(w, "  %s (%d): %s\n    e.g. %s\n", g.Cause, len(g.Claims), strings.Join(g.Claims, ", "), g.Conclusion); err != nil {
			return err
		}
	}
	return nil
}
