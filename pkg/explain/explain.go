package explain

import (
	"context"
	"fmt"
	"time"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Options tune where the explanation looks.
type Options struct {
	// LeaseNamespace is where the provisioner's leader Lease lives (its
	// --leader-election-namespace); empty searches every namespace.
	LeaseNamespace string
	// HeartbeatNamespace is where csi-node-publisher renews the heartbeat
	// Leases (its --lease-namespace); empty reads every namespace.
	HeartbeatNamespace string
	// Now is the time the explanation is made at; zero means time.Now.
	Now time.Time
	// Snapshots reads the VolumeSnapshot a claim restores, to judge where
	// the restore may be made (topology.CopyReach); nil: restores are not
	// judged.
	Snapshots snapclientset.Interface
}

// State is how a line of the chain came out.
type State string

// The states of a line.
const (
	// Pass: this step does not stop the claim.
	Pass State = "pass"
	// Fail: this step stops the claim (or would, for the nodes it names).
	Fail State = "fail"
	// Info: a fact that is neither.
	Info State = "info"
	// Unknown: the step could not be checked (a read was refused).
	Unknown State = "unknown"
)

// Line is one step of the chain.
type Line struct {
	// Step names the step: claim, class, provisioner, selected, segments,
	// source, capacity, filter, node, in-flight, events, access.
	Step  string `json:"step"`
	State State  `json:"state"`
	Text  string `json:"text"`
}

// Report is the explanation of one claim.
type Report struct {
	// Claim is "namespace/name"; Pod, when set, the pod it was asked for.
	Claim string `json:"claim"`
	Pod   string `json:"pod,omitempty"`
	// Phase is the claim's phase; Driver its class's provisioner.
	Phase  string `json:"phase"`
	Driver string `json:"driver,omitempty"`
	// Chain is the chain of checks, top to bottom.
	Chain []Line `json:"chain"`
	// Cause names the conclusion for scripts (see the Cause constants).
	Cause Cause `json:"cause"`
	// Conclusion is what would unblock the claim, or what decided the
	// place of a bound one, in plain words.
	Conclusion string `json:"conclusion"`
	// Denied lists the reads RBAC refused.
	Denied []Denied `json:"denied,omitempty"`
}

// readClusterCached reads the cluster for the claim's driver, or takes
// what an earlier claim of the driver read from cache.
func (r *reader) readClusterCached(ctx context.Context, cache map[string]*clusterReads) error {
	if r.s.class == nil {
		return nil
	}
	if c, ok := cache[r.s.class.Provisioner]; ok {
		c.apply(r.s)
		return nil
	}
	before := make(map[string]bool, len(r.s.read))
	for k := range r.s.read {
		before[k] = true
	}
	deniedBefore := len(r.s.denied)
	if err := r.readCluster(ctx); err != nil {
		return err
	}
	if cache != nil {
		cache[r.s.class.Provisioner] = capture(r.s, before, deniedBefore)
	}
	return nil
}

// Claim explains one claim.
func Claim(ctx context.Context, client kubernetes.Interface, namespace, name string, opts Options) (*Report, error) {
	return explain(ctx, client, namespace, name, nil, opts)
}

// Pod explains each claim the pod mounts, in the order of its volumes.
func Pod(ctx context.Context, client kubernetes.Interface, namespace, name string, opts Options) ([]*Report, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	var out []*Report
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		r, err := explain(ctx, client, namespace, v.PersistentVolumeClaim.ClaimName, pod, opts)
		if err != nil {
			return nil, err
		}
		r.Pod = namespace + "/" + name
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pod %s/%s mounts no PersistentVolumeClaim", namespace, name)
	}
	return out, nil
}

func explain(ctx context.Context, client kubernetes.Interface, namespace, name string, pod *v1.Pod, opts Options) (*Report, error) {
	return explainCached(ctx, client, namespace, name, pod, opts, nil)
}

// explainCached is explain with the cluster reads of each driver taken from
// cache, or read and put there (cache may be nil: no sharing).
func explainCached(ctx context.Context, client kubernetes.Interface, namespace, name string, pod *v1.Pod, opts Options, cache map[string]*clusterReads) (*Report, error) {
	logger := klog.FromContext(ctx)
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	r := &reader{client: client, opts: opts, s: &snapshot{read: map[string]bool{}}}
	if pod != nil {
		r.s.pods = []*v1.Pod{pod}
	}
	start := time.Now()
	if err := r.readClaim(ctx, namespace, name); err != nil {
		return nil, err
	}
	if err := r.readClusterCached(ctx, cache); err != nil {
		return nil, err
	}
	logger.V(4).Info("Read the cluster", "claim", klog.KObj(r.s.claim), "nodes", len(r.s.nodes), "duration", time.Since(start))
	e := &explainer{s: r.s, now: opts.Now}
	if err := e.run(); err != nil {
		return nil, err
	}
	rep := &Report{
		Claim: namespace + "/" + name, Phase: string(r.s.claim.Status.Phase),
		Chain: e.lines, Cause: e.cause, Conclusion: e.conclusion, Denied: r.s.denied,
	}
	if r.s.class != nil {
		rep.Driver = r.s.class.Provisioner
	}
	return rep, nil
}
