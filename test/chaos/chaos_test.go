package chaos

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

var (
	seedFlag     = flag.Int64("chaos.seed", 0, "seed of the run's random choices (0: from the clock); the run prints it")
	claimsFlag   = flag.Int("chaos.claims", 40, "claims to create")
	durationFlag = flag.Duration("chaos.duration", 60*time.Second, "how long claims are created and faults injected")
	settleFlag   = flag.Duration("chaos.settle", 4*time.Minute, "how long the invariants may take to hold once the faults stop")
	lateFlag     = flag.Bool("chaos.late-success", true, "also let slow CreateVolume calls be carried out after the provisioner gave up (the mock's lateSuccess; the mock answers ABORTED to another CreateVolume of the name meanwhile, as the CSI spec recommends)")
	fullFlag     = flag.Bool("chaos.full", false, "inject every fault: adds a kube-apiserver restart, a selected node deleted and a CSINode entry deleted during provisioning")
	bindFlag     = flag.Bool("chaos.bind-through", false, "run csi-provisioner with --bind-through: it binds each claim to its new PV itself, racing kube-controller-manager's PV controller")
)

const (
	annSelectedNode = "volume.kubernetes.io/selected-node"
	victimNode      = "node-z1-victim"
	csiNodeVictim   = "node-z2-b"
	// goroutineSlack is how many goroutines above its baseline a replica
	// may end with (HTTP/2 connections, timers of the client's backoff).
	goroutineSlack = 15
)

// claim is one claim of the run and what the run did with it.
type claim struct {
	name string
	uid  types.UID
	wffc bool
	// doomed claims are deleted 0-3 s after they are created (Immediate)
	// or selected (WaitForFirstConsumer).
	doomed bool
	// deleted: the run deleted the claim (downDelete: while no provisioner
	// ran).
	deleted, downDelete bool
	selectedSeen        bool
}

// replica is one csi-provisioner replica with leader election.
type replica struct {
	addr string
	p    *controlplane.Process
	n    int
}

// chaosRun is one seeded run.
type chaosRun struct {
	t    *testing.T
	ctx  context.Context
	ns   string
	seed int64

	rngMu sync.Mutex
	rng   *rand.Rand

	mu     sync.Mutex
	claims map[string]*claim
	counts map[string]int

	// provMu serializes the replicas' kills and starts.
	provMu   sync.Mutex
	replicas [2]*replica
	provDown atomic.Bool

	faultRules []faults.Rule
	wg         sync.WaitGroup
}

func (r *chaosRun) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Intn(n)
}

func (r *chaosRun) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

// between returns a random duration in [lo, hi).
func (r *chaosRun) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.intn(int(hi-lo)/int(time.Millisecond)))*time.Millisecond
}

func (r *chaosRun) count(what string, n int) {
	r.mu.Lock()
	r.counts[what] += n
	r.mu.Unlock()
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// retry runs f until it succeeds or returns an error that retrying cannot
// fix, for calls that meet a restarting kube-apiserver.
func retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for i := 0; i < 120; i++ {
		if err = f(ctx); err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return err
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return errors.Join(err, ctx.Err())
		}
	}
	return err
}

// TestChaos is the chaos run; its defaults are the smoke size that make
// test runs, make chaos passes the full size.
func TestChaos(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000
	}
	t.Logf("chaos seed %d (rerun: -chaos.seed=%d), %d claims over %s, full %t, late success %t, bind-through %t",
		seed, seed, *claimsFlag, *durationFlag, *fullFlag, *lateFlag, *bindFlag)
	fmt.Fprintf(os.Stderr, "chaos seed %d\n", seed)
	r := &chaosRun{t: t, ctx: ctx, ns: "chaos", seed: seed, rng: rand.New(rand.NewSource(seed)), //nolint:gosec // reproducible choices
		claims: map[string]*claim{}, counts: map[string]int{}}
	start := time.Now()
	r.setup()
	t.Cleanup(r.stopReplicas)
	baseline := r.goroutines()
	t.Logf("baseline goroutines of the leader: %d", baseline)

	faultCtx, stopFaults := context.WithTimeout(ctx, *durationFlag)
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.provisionerFaults(faultCtx) }()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.driverFaults(faultCtx) }()
	if *fullFlag {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.clusterFaults(faultCtx) }()
	}
	r.workload(faultCtx)
	<-faultCtx.Done()
	stopFaults()
	r.wg.Wait()
	r.restoreAll()
	faultsEnd := time.Now()

	var fig figures
	err := env.Cluster.WaitFor(ctx, *settleFlag, func(ctx context.Context) (bool, error) {
		fig = r.check(ctx, baseline)
		return len(fig.problems) == 0, nil
	})
	settled := time.Since(faultsEnd)
	if err != nil {
		fig = r.check(ctx, baseline)
	}
	r.summary(fig, time.Since(start), settled)
	if len(fig.problems) > 0 {
		sort.Strings(fig.problems)
		if len(fig.problems) > 40 {
			fig.problems = append(fig.problems[:40], fmt.Sprintf("... and %d more", len(fig.problems)-40))
		}
		t.Errorf("seed %d: %d invariant(s) broken after %s of settling (logs in %s):\n  %s", seed, len(fig.problems), *settleFlag,
			env.Cluster.LogDir, strings.Join(fig.problems, "\n  "))
	}
}

// setup creates the namespace, the two classes, the victim node, and runs
// two leader-elected replicas instead of the lab's provisioner.
func (r *chaosRun) setup() {
	t, ctx := r.t, r.ctx
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(r.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	for name, mode := range map[string]storagev1.VolumeBindingMode{"chaos-immediate": storagev1.VolumeBindingImmediate, "chaos-wffc": storagev1.VolumeBindingWaitForFirstConsumer} {
		if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Provisioner: lab.DriverName, VolumeBindingMode: &mode, ReclaimPolicy: &reclaim}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if *fullFlag {
		if err := env.AddNode(ctx, lab.NodeSpec{Name: victimNode, Zone: "z1", Driver: true}); err != nil {
			t.Fatal(err)
		}
	}
	env.StopProvisioner()
	for i := range r.replicas {
		addr, err := lab.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		r.replicas[i] = &replica{addr: addr}
		if err := r.startReplica(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		return r.leader(ctx) >= 0, nil
	}); err != nil {
		t.Fatalf("no replica leads: %v", err)
	}
	// Let the leader's informers and workers start before the baseline.
	sleep(ctx, 5*time.Second)
	// Outlasts --timeout; the caller's end cancels it.
	r.faultRules = []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(csiTimeout + 2*time.Second), Probability: 0.08}}
	if *lateFlag {
		// Outlasts --timeout, then creates the volume anyway.
		r.faultRules = append([]faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(csiTimeout + 3*time.Second),
			Probability: 0.06, LateSuccess: true}}, r.faultRules...)
	}
	if err := env.SetFaults(ctx, r.faultRules); err != nil {
		t.Fatal(err)
	}
}

// startReplica starts replica i unless it runs (another fault may have
// started it meanwhile).
func (r *chaosRun) startReplica(i int) error {
	rep := r.replicas[i]
	if rep.p != nil && !rep.p.Exited() {
		return nil
	}
	rep.n++
	args := []string{"--http-endpoint=" + rep.addr, "--enable-pprof",
		"--leader-election", "--leader-election-namespace=" + lab.PublisherNamespace,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}
	if *bindFlag {
		args = append(args, "--bind-through")
	}
	p, err := env.StartProvisionerReplica(fmt.Sprintf("csi-provisioner-%d-%d", i, rep.n), args...)
	if err != nil {
		return err
	}
	rep.p = p
	return nil
}

func (r *chaosRun) stopReplicas() {
	r.provMu.Lock()
	defer r.provMu.Unlock()
	for _, rep := range r.replicas {
		if rep != nil && rep.p != nil {
			rep.p.Stop(15 * time.Second)
		}
	}
}

// leader returns the index of the replica that leads (/readyz), or -1.
func (r *chaosRun) leader(ctx context.Context) int {
	for i, rep := range r.replicas {
		if rep.p == nil || rep.p.Exited() {
			continue
		}
		probe, cancel := context.WithTimeout(ctx, 3*time.Second)
		code := lab.HTTPStatus(probe, "http://"+rep.addr+"/readyz")
		cancel()
		if code == http.StatusOK {
			return i
		}
	}
	return -1
}

// goroutines returns the leader's goroutine count (from its
// /debug/pprof/goroutine, --enable-pprof), -1 without a leader.
func (r *chaosRun) goroutines() int {
	i := r.leader(r.ctx)
	if i < 0 {
		return -1
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.replicas[i].addr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return -1
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		return -1
	}
	return n
}

// provisionerFaults kills csi-provisioner every few seconds: mostly the
// leader (the standby takes over: a failover), every third time both
// replicas (no provisioner runs for 1-3 s, and claims are deleted
// meanwhile); the killed replicas start again, as a Deployment would.
func (r *chaosRun) provisionerFaults(ctx context.Context) {
	for cycle := 0; ; cycle++ {
		if !sleep(ctx, r.between(4*time.Second, 9*time.Second)) {
			return
		}
		if cycle%3 == 2 {
			r.provisionerDown(ctx, r.between(time.Second, 3*time.Second), func() {
				for i := 0; i < 2; i++ {
					if c := r.randomLiveClaim(); c != nil {
						r.deleteClaim(c)
					}
				}
			})
			continue
		}
		r.provMu.Lock()
		victim := r.leader(ctx)
		if victim < 0 {
			victim = r.intn(2)
		} else if other := r.replicas[1-victim].p; other != nil && !other.Exited() {
			r.count("leader failovers (kill -9 of the leader, standby up)", 1)
		}
		r.replicas[victim].p.Kill()
		r.count("csi-provisioner kill -9", 1)
		r.provMu.Unlock()
		sleep(ctx, r.between(500*time.Millisecond, 2*time.Second))
		r.provMu.Lock()
		if err := r.startReplica(victim); err != nil {
			r.t.Errorf("restarting replica %d: %v", victim, err)
		}
		r.provMu.Unlock()
	}
}

// provisionerDown kills both replicas, runs during (in its own goroutine),
// waits d and starts both again.
func (r *chaosRun) provisionerDown(ctx context.Context, d time.Duration, during func()) {
	r.provMu.Lock()
	defer r.provMu.Unlock()
	for _, rep := range r.replicas {
		if !rep.p.Exited() {
			rep.p.Kill()
			r.count("csi-provisioner kill -9", 1)
		}
	}
	r.provDown.Store(true)
	r.count("windows with no provisioner", 1)
	if during != nil {
		during()
	}
	sleep(ctx, d)
	r.provDown.Store(false)
	for i := range r.replicas {
		if err := r.startReplica(i); err != nil {
			r.t.Errorf("restarting replica %d: %v", i, err)
		}
	}
}

// driverFaults kills the mock driver's controller every 12-25 s and starts
// it again after 1-2 s (same state file); the fault rules are set again.
func (r *chaosRun) driverFaults(ctx context.Context) {
	for {
		if !sleep(ctx, r.between(12*time.Second, 25*time.Second)) {
			return
		}
		env.KillController()
		r.count("mock-driver controller kill -9", 1)
		sleep(context.WithoutCancel(ctx), r.between(time.Second, 2*time.Second))
		if err := env.RestartController(); err != nil {
			r.t.Errorf("restarting the mock driver's controller: %v", err)
			return
		}
		if err := env.SetFaults(ctx, r.faultRules); err != nil && ctx.Err() == nil {
			r.t.Errorf("setting the fault rules: %v", err)
		}
	}
}

// clusterFaults, with -chaos.full: a selected node deleted, a CSINode entry
// deleted during provisioning and a kube-apiserver restart, at about a
// fifth, two fifths and three fifths of the run.
func (r *chaosRun) clusterFaults(ctx context.Context) {
	step := *durationFlag / 5
	if !sleep(ctx, step) {
		return
	}
	r.deleteSelectedNode(ctx)
	if !sleep(ctx, step/2) {
		return
	}
	r.deleteCSINodeDuringProvisioning(ctx)
	if !sleep(ctx, step/2) {
		return
	}
	if err := env.Cluster.RestartAPIServer(context.WithoutCancel(ctx)); err != nil {
		r.t.Errorf("restarting kube-apiserver: %v", err)
		return
	}
	r.count("kube-apiserver restarts", 1)
}

// deleteSelectedNode: with no provisioner running, a claim and a pod that
// prefers the victim node are created; once the scheduler selected the node
// for the claim, the node is deleted (with its CSINode, its owner's
// garbage), and the provisioners start again.
func (r *chaosRun) deleteSelectedNode(ctx context.Context) {
	r.provisionerDown(ctx, 0, func() {
		c := r.createClaim(ctx, "victim-node", true, false, victimNode)
		if c == nil {
			return
		}
		selected := r.waitSelected(ctx, c, victimNode)
		env.StopPublisher(victimNode)
		if err := retry(ctx, func(ctx context.Context) error {
			return client.CoreV1().Nodes().Delete(ctx, victimNode, metav1.DeleteOptions{})
		}); err != nil {
			r.t.Errorf("deleting node %s: %v", victimNode, err)
			return
		}
		_ = retry(ctx, func(ctx context.Context) error {
			return client.StorageV1().CSINodes().Delete(ctx, victimNode, metav1.DeleteOptions{})
		})
		if selected {
			r.count("selected nodes deleted (claim selected for it, not provisioned)", 1)
		} else {
			r.t.Logf("node %s deleted, but claim %s was never selected for it", victimNode, c.name)
			r.count("nodes deleted (no claim selected for it)", 1)
		}
	})
}

// deleteCSINodeDuringProvisioning: CreateVolume is slowed down (below
// --timeout), a claim is selected for csiNodeVictim, and while its
// CreateVolume runs the node's driver goes (publisher stopped, CSINode
// deleted); it comes back 10 s later.
func (r *chaosRun) deleteCSINodeDuringProvisioning(ctx context.Context) {
	rules := append([]faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(csiTimeout - time.Second), Count: 2}}, r.faultRules...)
	if err := env.SetFaults(ctx, rules); err != nil {
		r.t.Logf("slowing CreateVolume down: %v", err)
	}
	c := r.createClaim(ctx, "csinode-gone", true, false, csiNodeVictim)
	if c == nil {
		return
	}
	if r.waitSelected(ctx, c, csiNodeVictim) {
		env.StopPublisher(csiNodeVictim)
		if err := retry(ctx, func(ctx context.Context) error {
			return client.StorageV1().CSINodes().Delete(ctx, csiNodeVictim, metav1.DeleteOptions{})
		}); err != nil && !apierrors.IsNotFound(err) {
			r.t.Errorf("deleting CSINode %s: %v", csiNodeVictim, err)
		}
		r.count("CSINode entries deleted during provisioning", 1)
	}
	sleep(context.WithoutCancel(ctx), 10*time.Second)
	if err := env.StartPublisher(context.WithoutCancel(ctx), csiNodeVictim); err != nil {
		r.t.Errorf("restoring the CSINode of %s: %v", csiNodeVictim, err)
	}
	_ = env.SetFaults(context.WithoutCancel(ctx), r.faultRules)
}

// waitSelected waits up to a minute for the claim to be selected for node.
func (r *chaosRun) waitSelected(ctx context.Context, c *claim, node string) bool {
	return env.Cluster.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, c.name, metav1.GetOptions{})
		return err == nil && pvc.Annotations[annSelectedNode] == node, nil
	}) == nil
}

// workload creates the claims, evenly over the run, and deletes the doomed
// ones 0-3 s after they were created (Immediate) or selected (WFFC, seen by
// an informer).
func (r *chaosRun) workload(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(r.ns))
	inf := factory.Core().V1().PersistentVolumeClaims().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		pvc, ok := obj.(*v1.PersistentVolumeClaim)
		if !ok || pvc.Annotations[annSelectedNode] == "" {
			return
		}
		r.mu.Lock()
		c := r.claims[pvc.Name]
		fire := c != nil && c.uid == pvc.UID && c.doomed && !c.selectedSeen
		if fire {
			c.selectedSeen = true
		}
		r.mu.Unlock()
		if fire {
			time.AfterFunc(r.between(0, 3*time.Second), func() { r.deleteClaim(c) })
		}
	}}); err != nil {
		r.t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	n := *claimsFlag
	// Claims come during the first 80% of the run, so that the last ones
	// still meet faults.
	interval := *durationFlag * 8 / 10 / time.Duration(n)
	next := time.Now()
	for i := 0; i < n; i++ {
		wffc := r.float() < 0.6
		doomed := r.float() < 0.25
		c := r.createClaim(context.WithoutCancel(ctx), fmt.Sprintf("c%04d", i), wffc, doomed, "")
		if c != nil && doomed && !wffc {
			time.AfterFunc(r.between(0, 3*time.Second), func() { r.deleteClaim(c) })
		}
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	// Doomed claims selected during the last seconds are deleted still.
	time.Sleep(3 * time.Second)
}

// createClaim creates a 1 GiB claim and a pod of the same name that uses it
// (preferring node preferNode when set), and records it.
func (r *chaosRun) createClaim(ctx context.Context, name string, wffc, doomed bool, preferNode string) *claim {
	class := "chaos-immediate"
	if wffc {
		class = "chaos-wffc"
	}
	var created *v1.PersistentVolumeClaim
	if err := retry(ctx, func(ctx context.Context) error {
		var err error
		created, err = client.CoreV1().PersistentVolumeClaims(r.ns).Create(ctx, &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// A create that the restarting API server carried out but
			// never answered.
			created, err = client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			r.t.Errorf("creating claim %s: %v", name, err)
			return nil
		}
	}
	c := &claim{name: name, uid: created.UID, wffc: wffc, doomed: doomed}
	r.mu.Lock()
	r.claims[name] = c
	r.mu.Unlock()
	r.count("claims created", 1)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
	}}
	if preferNode != "" {
		pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
			Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{preferNode}}}}}}}}
	}
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := client.CoreV1().Pods(r.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}); err != nil && !apierrors.IsAlreadyExists(err) {
		r.t.Errorf("creating pod %s: %v", name, err)
	}
	return c
}

// deleteClaim deletes the claim's pod and the claim, once.
func (r *chaosRun) deleteClaim(c *claim) {
	r.mu.Lock()
	if c.deleted {
		r.mu.Unlock()
		return
	}
	c.deleted = true
	c.downDelete = r.provDown.Load()
	r.mu.Unlock()
	ctx := context.WithoutCancel(r.ctx)
	_ = retry(ctx, func(ctx context.Context) error {
		return client.CoreV1().Pods(r.ns).Delete(ctx, c.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	uid := c.uid
	if err := retry(ctx, func(ctx context.Context) error {
		return client.CoreV1().PersistentVolumeClaims(r.ns).Delete(ctx, c.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	}); err != nil && !apierrors.IsNotFound(err) {
		r.t.Errorf("deleting claim %s: %v", c.name, err)
	}
	r.count("claims deleted", 1)
	if c.downDelete {
		r.count("claims deleted while no provisioner ran", 1)
	}
	if c.selectedSeen {
		r.count("claims deleted 0-3 s after selection", 1)
	}
}

// randomLiveClaim returns a claim that the run has not deleted, or nil.
func (r *chaosRun) randomLiveClaim() *claim {
	r.mu.Lock()
	defer r.mu.Unlock()
	var live []*claim
	for _, c := range r.claims {
		if !c.deleted {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].name < live[j].name })
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return live[r.rng.Intn(len(live))]
}

// restoreAll ends the faults: both replicas run, the driver runs without
// fault rules.
func (r *chaosRun) restoreAll() {
	ctx := r.ctx
	if err := env.RestartController(); err != nil {
		r.t.Errorf("restarting the mock driver's controller: %v", err)
	}
	if err := env.SetFaults(ctx, nil); err != nil {
		r.t.Errorf("clearing the fault rules: %v", err)
	}
	r.provMu.Lock()
	defer r.provMu.Unlock()
	for i, rep := range r.replicas {
		if rep.p == nil || rep.p.Exited() {
			if err := r.startReplica(i); err != nil {
				r.t.Errorf("restarting replica %d: %v", i, err)
			}
		}
	}
}
