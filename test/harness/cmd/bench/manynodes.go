package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// The nodes scenario: --instances real csi-provisioner --node-deployment
// processes at once, one per node of instanceNodes, each beside its
// node-local driver (fleet), then N claims of the node-local class
// selected for their nodes, round robin, created at once. Its reference
// is one central csi-provisioner (no --node-deployment) provisioning the
// same claims through one controller driver with a segment per instance
// node. What is measured is the API server: its CPU per provisioned
// volume, and the watch events it sends.

// centralArgs are the central reference's flags: the backlog's API rates
// (so that the single process is not paced by its rate limiter) and
// capacity tracking as the instances have it, on a client as fast.
var centralArgs = []string{"--kube-api-qps=1000", "--kube-api-burst=2000", "--enable-capacity", "--capacity-namespace=" + lab.CapacityNamespace,
	"--capacity-poll-interval=1m", "--capacity-qps=1000", "--capacity-burst=2000", "--timeout=60s"}

// upstreamNodeArgs are nodeArgs in upstream external-provisioner v6.3.0's
// flags: it has no --capacity-namespace (NAMESPACE says it) and its
// capacity objects need an owner unless --capacity-ownerref-level=-1.
var upstreamNodeArgs = []string{"--node-deployment", "--node-deployment-immediate-binding=true", "--node-deployment-base-delay=20s",
	"--node-deployment-max-delay=1m", "--enable-capacity", "--capacity-ownerref-level=-1", "--capacity-poll-interval=1m",
	"--timeout=60s", "--worker-threads=4"}

// routerBinary is the central component selection by label may need; the
// scenario starts it from --bin-dir when the instances' flags ask for that
// selection.
const routerBinary = "csi-node-router"

// instances returns the number of instances of a nodes run: --instances,
// at most one per node.
func (e *env) instances() int {
	return min(e.opts.Instances, e.size)
}

// labelSelection reports whether the instances' extra flags select by
// label.
func (e *env) labelSelection() bool {
	for _, a := range e.opts.NodeArgs {
		if strings.HasPrefix(a, "--node-deployment-selection=label") {
			return true
		}
	}
	return false
}

// deployment names a row of the nodes scenario.
func (e *env) deployment(contender string, central bool) string {
	if central {
		return "central ×1"
	}
	d := fmt.Sprintf("node ×%d", e.instances())
	if contender == ours && len(e.opts.NodeArgs) > 0 {
		d += " " + strings.Join(e.opts.NodeArgs, " ")
	}
	return d
}

// nodesSpecs returns how each provisioner process of a nodes run starts.
func (e *env) nodesSpecs(ctx context.Context, f *fleet, contender string, central bool) ([]instanceSpec, error) {
	e.runs++
	if central {
		if err := f.centralDriver(e.cluster.Dir); err != nil {
			return nil, err
		}
		kubeconfig, err := e.cluster.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-provisioner")
		if err != nil {
			return nil, err
		}
		args := append([]string{"--csi-address=unix://" + f.centralSock, "--kubeconfig=" + kubeconfig}, commonArgs...)
		args = append(append(args, centralArgs...), e.opts.ProvisionerArgs...)
		return []instanceSpec{{name: fmt.Sprintf("csi-provisioner-central-%d", e.runs), args: args}}, nil
	}
	specs := make([]instanceSpec, len(f.nodes))
	for i, node := range f.nodes {
		args := append([]string{"--csi-address=unix://" + f.sockets[i], "--kubeconfig=" + f.kubeconfig}, commonArgs...)
		env := []string{"NODE_NAME=" + node}
		if contender == theirs {
			args = append(args, upstreamNodeArgs...)
			env = append(env, "NAMESPACE="+lab.CapacityNamespace)
		} else {
			args = append(append(args, nodeArgs...), e.opts.NodeArgs...)
		}
		specs[i] = instanceSpec{name: fmt.Sprintf("csi-provisioner-%d-%s", e.runs, node), args: append(args, e.opts.ProvisionerArgs...), env: env}
	}
	return specs, nil
}

// startRouter starts csi-node-router when ours runs with selection by
// label. It returns a reason to skip the run when the binary is not in
// --bin-dir.
func (e *env) startRouter(contender string, central bool) (*controlplane.Process, string, error) {
	if contender != ours || central || !e.labelSelection() {
		return nil, "", nil
	}
	path := filepath.Join(e.lab.BinDir, routerBinary)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Sprintf("%s is not in %s: the nodes run with %s needs it", routerBinary, e.lab.BinDir,
			strings.Join(e.opts.NodeArgs, " ")), nil
	}
	p, err := e.cluster.StartProcess(fmt.Sprintf("%s-%d", routerBinary, e.runs), path,
		[]string{"--driver-name=" + lab.DriverName, "--kubeconfig=" + e.cluster.Kubeconfig, "-v=2"}, nil)
	return p, "", err
}

// nodesSample is what the nodes scenario reads from /proc and the API
// server's /metrics at one moment.
type nodesSample struct {
	apiserver, etcd, instances float64 // CPU ms
	watch                      watchCounts
}

// sample reads the CPU of the API server, etcd and the provisioners, and
// the API server's watch counters.
func (e *env) sample(ctx context.Context, apiserver, etcd proc, procs []*controlplane.Process) (nodesSample, error) {
	var s nodesSample
	var err error
	if s.apiserver, err = cpuMillis(apiserver.pid); err != nil {
		return s, err
	}
	if s.etcd, err = cpuMillis(etcd.pid); err != nil {
		return s, err
	}
	for _, p := range procs {
		ms, _ := cpuMillis(p.Pid())
		s.instances += ms
	}
	s.watch, err = e.watchCounts(ctx)
	return s, err
}

// runNodes is one run of the nodes scenario: contender's instances, or
// the central reference. It returns nil (and logs why) when the run is
// skipped.
func (e *env) runNodes(ctx context.Context, contender string, central bool, rep int) (*Result, error) {
	logger := klog.FromContext(ctx)
	n := e.opts.Claims
	f, err := e.prepareFleet(ctx, e.instances())
	if err != nil {
		return nil, err
	}
	r := e.newResult("nodes", contender, rep)
	r.Instances, r.Deployment = len(f.nodes), e.deployment(contender, central)
	router, skip, err := e.startRouter(contender, central)
	if err != nil || skip != "" {
		if skip != "" {
			logger.Info("Skipping the nodes run", "deployment", r.Deployment, "reason", skip)
		}
		return nil, err
	}
	if router != nil {
		defer router.Stop(15 * time.Second)
	}
	ns, err := e.namespace(ctx, "nodes")
	if err != nil {
		return nil, err
	}
	o, err := observe(ctx, e.client, ns, n)
	if err != nil {
		return nil, err
	}
	defer o.Stop()
	procs, err := e.launchNodes(ctx, &r, f, contender, central)
	if err != nil {
		return nil, err
	}
	defer stopAll(procs)
	if err := e.provisionNodes(ctx, &r, o, f, ns, procs, router); err != nil {
		return nil, err
	}
	if err := e.cleanUpNodes(ctx, &r, o, f, ns, procs); err != nil {
		return nil, err
	}
	e.keep(ctx, procs[0].LogPath(), fmt.Sprintf("nodes-%dnodes-%s-rep%d-%s.log", e.size, contender, rep, procs[0].Name))
	return &r, nil
}

// launchNodes starts the run's provisioners, waits until all have synced,
// and records how long that took and what it cost the API server.
func (e *env) launchNodes(ctx context.Context, r *Result, f *fleet, contender string, central bool) ([]*controlplane.Process, error) {
	specs, err := e.nodesSpecs(ctx, f, contender, central)
	if err != nil {
		return nil, err
	}
	apiserver, err := e.coreProcess("kube-apiserver")
	if err != nil {
		return nil, err
	}
	before, err := cpuMillis(apiserver.pid)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	procs, err := e.startInstances(ctx, e.provisionerBinary(contender), specs)
	if err != nil {
		return nil, err
	}
	r.Startup = time.Since(start).Seconds()
	after, _ := cpuMillis(apiserver.pid)
	r.APIServerCPUStartup = after - before
	for _, p := range procs {
		rss, _ := rssMB(p.Pid())
		r.RSSSynced += rss
	}
	return procs, nil
}

// provisionNodes creates the run's claims, spread over the instance nodes,
// waits until all are Bound and fills the figures and checks of r.
func (e *env) provisionNodes(ctx context.Context, r *Result, o *observer, f *fleet, ns string, procs []*controlplane.Process,
	router *controlplane.Process) error {
	n := e.opts.Claims
	apiserver, err := e.coreProcess("kube-apiserver")
	if err != nil {
		return err
	}
	etcd, err := e.coreProcess("etcd")
	if err != nil {
		return err
	}
	all := procs
	if router != nil {
		all = append(append([]*controlplane.Process(nil), procs...), router)
	}
	o.setPid(apiserver.pid)
	before, err := e.sample(ctx, apiserver, etcd, all)
	if err != nil {
		return err
	}
	start := time.Now()
	created, err := e.createSpreadClaims(ctx, ns, f.nodes, n)
	if err != nil {
		return err
	}
	alive := func() error { return exitedOne(all) }
	if err := o.waitUntil(ctx, e.runTimeout(), alive, func(_, _, bound, _ int) bool { return bound >= n }); err != nil {
		return err
	}
	after, err := e.sample(ctx, apiserver, etcd, all)
	if err != nil {
		return err
	}
	o.mu.Lock()
	first, last := span(o.pvAdded)
	_, allBound := span(o.bound)
	r.PerSecond = rate(len(o.pvAdded), first, last)
	r.ToFirst, r.ToAll = first.Sub(start).Seconds(), allBound.Sub(start).Seconds()
	r.P50, r.P99 = latencies(created, o.bound, start)
	r.CPUSteadyPerVolume = (o.cpuLastPV - o.cpuFirstPV) / float64(n)
	o.mu.Unlock()
	perVol := func(a, b float64) float64 { return (b - a) / float64(n) }
	r.APIServerCPUPerVolume = perVol(before.apiserver, after.apiserver)
	r.EtcdCPUPerVolume = perVol(before.etcd, after.etcd)
	r.CPUPerVolume = perVol(before.instances, after.instances)
	r.WatchEventsPerVolume = perVol(float64(before.watch.sent), float64(after.watch.sent))
	r.WatchDispatchedPerVolume = perVol(float64(before.watch.dispatched), float64(after.watch.dispatched))
	for _, p := range procs {
		peak, _ := peakRSSMB(p.Pid())
		anon, _ := rssSplitMB(p.Pid())
		r.PeakRSS += peak
		r.RSSAnon += anon
		r.InstancePeakRSSMax = max(r.InstancePeakRSSMax, peak)
	}
	if router != nil {
		r.RouterPeakRSS, _ = peakRSSMB(router.Pid())
	}
	end, reqs, err := e.settle(ctx, start)
	if err != nil {
		r.Failures = append(r.Failures, "audit log: "+err.Error())
	}
	account(r, reqs, start, allBound, end)
	e.checkFleetVolumes(ctx, r, o, f, ns)
	return nil
}

// createSpreadClaims creates n claims of the node-local class in ns, claim
// i selected for nodes[i % len(nodes)] as the scheduler and the PV
// controller leave it, 32 at once, and returns when each was created.
func (e *env) createSpreadClaims(ctx context.Context, ns string, nodes []string, n int) (map[string]time.Time, error) {
	createdAt := make([]time.Time, n)
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		c := claim(i, nodeLocalClass)
		node := nodes[i%len(nodes)]
		c.Annotations = map[string]string{annSelectedNode: node, annStorageProvisioner: lab.DriverName, annBetaStorageProvisioner: lab.DriverName}
		if _, err := e.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return err
		}
		createdAt[i] = time.Now()
		return nil
	})
	out := make(map[string]time.Time, n)
	for i, t := range createdAt {
		out[claim(i, "").Name] = t
	}
	return out, err
}

// claimIndex returns i of claim i's name, -1 for another name.
func claimIndex(name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "claim-"))
	if err != nil || !strings.HasPrefix(name, "claim-") {
		return -1
	}
	return i
}

// runNodesRounds runs the reps of the nodes scenario: each contender's
// instances, then the central reference.
func (e *env) runNodesRounds(ctx context.Context, contenders []string, record func(...Result)) error {
	for rep := 1; rep <= e.opts.Reps; rep++ {
		type row struct {
			contender string
			central   bool
		}
		rows := []row{}
		for _, c := range contenders {
			rows = append(rows, row{c, false})
		}
		if e.opts.NodesCentral {
			rows = append(rows, row{ours, true})
		}
		for _, w := range rows {
			klog.FromContext(ctx).Info("Nodes run started", "nodes", e.size, "instances", e.instances(), "rep", rep,
				"contender", w.contender, "deployment", e.deployment(w.contender, w.central))
			r, err := e.runNodes(ctx, w.contender, w.central, rep)
			if err != nil {
				return fmt.Errorf("nodes, %s, %s, rep %d: %w", w.contender, e.deployment(w.contender, w.central), rep, err)
			}
			if r != nil {
				record(*r)
			}
		}
	}
	return nil
}
