package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// syncedLine is what the provisioning library (ours and upstream's) logs
// once its informers have synced and its workers run.
const syncedLine = "Started provisioner controller"

// baseRunTimeout bounds every wait of a run, with kube-controller-manager
// at a high API rate (Options.ControllerManagerQPS).
const baseRunTimeout = 15 * time.Minute

// runTimeout bounds every wait of a run: with kube-controller-manager at
// its default 20 requests/s, baseRunTimeout plus the time its PV controller
// takes for four writes per claim (mark, three binding writes).
func (e *env) runTimeout() time.Duration {
	if e.opts.ControllerManagerQPS != 0 {
		return baseRunTimeout
	}
	return baseRunTimeout + time.Duration(e.opts.Claims)*4*time.Second/20
}

// backlogArgs raise the client-side rate limit for the backlog and delete
// runs so that they measure the provisioner, not its rate limiter (both
// flags are upstream's); burst runs at the defaults.
var backlogArgs = []string{"--kube-api-qps=1000", "--kube-api-burst=2000"}

// commonArgs are every run's extra flags: the lab's -v=3 logs per claim.
var commonArgs = []string{"-v=2"}

// launched is a provisioner started for a run.
type launched struct {
	proc       *controlplane.Process
	start      time.Time
	synced     time.Time
	cpuSynced  float64
	rssSynced  float64
	contender  string
	binaryPath string
}

// launch starts the contender's provisioner as the lab's and waits until
// it logs that its informers have synced.
func (e *env) launch(ctx context.Context, contender string, o *observer, extra ...string) (*launched, error) {
	return e.launchEnv(ctx, contender, o, nil, extra...)
}

// launchEnv is launch with env ("NAME=value") added to the provisioner's
// environment.
func (e *env) launchEnv(ctx context.Context, contender string, o *observer, env []string, extra ...string) (*launched, error) {
	binary := e.provisionerBinary(contender)
	args := append(append(append([]string(nil), commonArgs...), extra...), e.opts.ProvisionerArgs...)
	if contender == oursBind {
		args = append(args, "--bind-through")
	}
	return e.launchWith(ctx, contender, binary, o, func() (*controlplane.Process, error) {
		if err := e.lab.StartProvisionerBinaryEnv(binary, env, args...); err != nil {
			return nil, err
		}
		return e.lab.Provisioner(), nil
	})
}

// launchWith starts a provisioner binary with start and waits until it
// logs that its informers have synced; then it samples its CPU and RSS.
func (e *env) launchWith(ctx context.Context, contender, binary string, o *observer, start func() (*controlplane.Process, error)) (*launched, error) {
	l := &launched{contender: contender, binaryPath: binary}
	l.start = time.Now()
	var err error
	if l.proc, err = start(); err != nil {
		return nil, err
	}
	o.setPid(l.proc.Pid())
	deadline := time.Now().Add(e.runTimeout())
	for {
		if found, err := logHas(l.proc.LogPath(), syncedLine); err != nil {
			return nil, err
		} else if found {
			l.synced = time.Now()
			l.cpuSynced, _ = cpuMillis(l.proc.Pid())
			l.rssSynced, _ = rssMB(l.proc.Pid())
			return l, nil
		}
		if l.proc.Exited() {
			return nil, fmt.Errorf("%s exited: %v (log %s)", l.binaryPath, l.proc.Wait(), l.proc.LogPath())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s never logged %q (log %s)", l.binaryPath, syncedLine, l.proc.LogPath())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive returns an error once the process has exited.
func (l *launched) alive() error {
	if l.proc.Exited() {
		return fmt.Errorf("%s exited: %v (log %s)", l.binaryPath, l.proc.Wait(), l.proc.LogPath())
	}
	return nil
}

// logHas reports whether the file contains substr.
func logHas(path, substr string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			return true, nil
		}
	}
	return false, sc.Err()
}

// settle waits until the provisioner has posted no Event for 3 s (at most
// a minute) and returns that moment and the requests so far.
func (e *env) settle(ctx context.Context, from time.Time) (time.Time, []request, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		reqs, err := readAudit(e.cluster.AuditLog)
		if err != nil {
			return time.Time{}, nil, err
		}
		last := lastEventWrite(reqs, from)
		if last.IsZero() {
			last = from
		}
		if time.Since(last) > 3*time.Second || time.Now().After(deadline) {
			return time.Now(), reqs, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// account fills the requests and Events of r from the audit log between
// start and end; done is when the work was complete (all Bound, all gone).
func account(r *Result, reqs []request, start, done, end time.Time) {
	r.Requests = countRequests(reqs, start, end)
	r.RequestsPerVolume = float64(sum(r.Requests)) / float64(r.Volumes)
	for _, q := range reqs {
		if !isEventWrite(q.key) || q.at.Before(start) || !q.at.Before(end) {
			continue
		}
		if q.at.After(done) {
			r.EventsAfter++
		} else {
			r.EventsDuring++
		}
	}
}

// newResult starts a Result with the machine's load.
func (e *env) newResult(scenario, contender string, rep int) Result {
	r := Result{Scenario: scenario, Contender: contender, Binary: e.provisionerBinary(contender), Nodes: e.size,
		Volumes: e.opts.Claims, Rep: rep, Failures: []string{}}
	r.LoadAverage, _ = loadAverage()
	return r
}

// runBacklog is scenario A′ (and, with withDelete, the delete scenario on
// its claims): N Immediate claims exist, then the provisioner starts.
func (e *env) runBacklog(ctx context.Context, contender string, rep int, withDelete bool) ([]Result, error) {
	n := e.opts.Claims
	ns, err := e.namespace(ctx, "backlog")
	if err != nil {
		return nil, err
	}
	o, err := observe(ctx, e.client, ns, n)
	if err != nil {
		return nil, err
	}
	defer o.Stop()
	created, err := e.createClaims(ctx, ns, immediateClass, n)
	if err != nil {
		return nil, err
	}
	if err := e.waitMarked(ctx, ns, n); err != nil {
		return nil, fmt.Errorf("claims never marked for the driver by the PV controller: %w", err)
	}
	r := e.newResult("backlog", contender, rep)
	args := backlogArgs
	var prof *profiler
	if contender == ours || contender == oursBind {
		name := fmt.Sprintf("backlog-rep%d", rep)
		if contender == oursBind {
			name = fmt.Sprintf("backlog-bind-rep%d", rep)
		}
		var pargs []string
		if prof, pargs, err = e.startProfiler(ctx, name, 20); err != nil {
			return nil, err
		}
		args = append(append([]string(nil), args...), pargs...)
	}
	if probe, err := e.machineProbe(); err != nil {
		klog.FromContext(ctx).Error(err, "Finding the control plane's processes; the machine's CPU is not reported")
	} else {
		o.watchMachine(probe)
	}
	l, err := e.launch(ctx, contender, o, args...)
	if err != nil {
		return nil, err
	}
	defer e.lab.StopProvisioner()
	if err := o.waitUntil(ctx, e.runTimeout(), l.alive, func(_, _, bound, _ int) bool { return bound >= n }); err != nil {
		return nil, err
	}
	e.finishCreate(ctx, &r, o, l, l.start, created)
	prof.heap(ctx)
	e.checkVolumes(ctx, &r, o, ns)
	results := []Result{r}
	if withDelete {
		d, err := e.runDelete(ctx, contender, rep, ns, o, l)
		if err != nil {
			return nil, err
		}
		return append(results, d), nil
	}
	return results, e.cleanUp(ctx, ns, o, l)
}

// finishCreate fills the figures of a run that created PVs, once all
// claims are Bound.
func (e *env) finishCreate(ctx context.Context, r *Result, o *observer, l *launched, start time.Time, created map[string]time.Time) {
	o.mu.Lock()
	first, last := span(o.pvAdded)
	_, allBound := span(o.bound)
	r.PerSecond = rate(len(o.pvAdded), first, last)
	r.ToFirst, r.ToAll = first.Sub(start).Seconds(), allBound.Sub(start).Seconds()
	r.ToAllPVs = last.Sub(start).Seconds()
	r.P50, r.P99 = latencies(created, o.bound, start)
	r.CPUSteadyPerVolume = (o.cpuLastPV - o.cpuFirstPV) / float64(r.Volumes)
	r.MachineToAllPVs = window(o.atStart, o.atAllPVs, r.Volumes)
	r.MachineToAllBound = window(o.atStart, o.atAllBound, r.Volumes)
	o.mu.Unlock()
	r.Startup, r.CPUStartup, r.RSSSynced = l.synced.Sub(l.start).Seconds(), l.cpuSynced, l.rssSynced
	end, reqs, err := e.settle(ctx, start)
	if err != nil {
		r.Failures = append(r.Failures, "audit log: "+err.Error())
	}
	account(r, reqs, start, allBound, end)
	e.accountBinder(r, o, end)
	cpu, _ := cpuMillis(l.proc.Pid())
	from := 0.0
	if start.After(l.start) {
		from = l.cpuSynced // burst: the run starts after start-up
	}
	r.CPUPerVolume = (cpu - from) / float64(r.Volumes)
	r.PeakRSS, _ = peakRSSMB(l.proc.Pid())
	r.RSSAnon, r.RSSFile = rssSplitMB(l.proc.Pid())
}

// runDelete is the delete scenario: the backlog's claims are deleted
// (reclaim policy Delete) while the same provisioner runs.
func (e *env) runDelete(ctx context.Context, contender string, rep int, ns string, o *observer, l *launched) (Result, error) {
	r := e.newResult("delete", contender, rep)
	n := e.opts.Claims
	cpuStart, _ := cpuMillis(l.proc.Pid())
	start := time.Now()
	deleted, err := e.deleteClaims(ctx, ns, n)
	if err != nil {
		return r, err
	}
	if err := o.waitUntil(ctx, e.runTimeout(), l.alive, func(_, gone, _, _ int) bool { return gone >= n }); err != nil {
		return r, err
	}
	o.mu.Lock()
	first, last := span(o.pvGone)
	r.PerSecond = rate(len(o.pvGone), first, last)
	r.ToFirst, r.ToAll = first.Sub(start).Seconds(), last.Sub(start).Seconds()
	gone := map[string]time.Time{}
	for pv, t := range o.pvGone {
		gone[o.pvClaim[pv]] = t
	}
	r.CPUSteadyPerVolume = (o.cpuLastGon - o.cpuFirstGone) / float64(n)
	o.mu.Unlock()
	r.P50, r.P99 = latencies(deleted, gone, start)
	end, reqs, err := e.settle(ctx, start)
	if err != nil {
		r.Failures = append(r.Failures, "audit log: "+err.Error())
	}
	account(&r, reqs, start, last, end)
	cpu, _ := cpuMillis(l.proc.Pid())
	r.CPUPerVolume = (cpu - cpuStart) / float64(n)
	r.PeakRSS, _ = peakRSSMB(l.proc.Pid())
	e.checkDeleted(ctx, &r)
	return r, nil
}

// runBurst is scenario A: the provisioner runs at its defaults, then N
// claims are created at once.
func (e *env) runBurst(ctx context.Context, contender string, rep int) (Result, error) {
	n := e.opts.Claims
	r := e.newResult("burst", contender, rep)
	ns, err := e.namespace(ctx, "burst")
	if err != nil {
		return r, err
	}
	o, err := observe(ctx, e.client, ns, n)
	if err != nil {
		return r, err
	}
	defer o.Stop()
	l, err := e.launch(ctx, contender, o)
	if err != nil {
		return r, err
	}
	defer e.lab.StopProvisioner()
	start := time.Now()
	created, err := e.createClaims(ctx, ns, immediateClass, n)
	if err != nil {
		return r, err
	}
	if err := o.waitUntil(ctx, e.runTimeout(), l.alive, func(_, _, bound, _ int) bool { return bound >= n }); err != nil {
		return r, err
	}
	e.finishCreate(ctx, &r, o, l, start, created)
	e.checkVolumes(ctx, &r, o, ns)
	return r, e.cleanUp(ctx, ns, o, l)
}

// cleanUp deletes a run's claims and waits until their PVs are gone, with
// the run's provisioner still running.
func (e *env) cleanUp(ctx context.Context, ns string, o *observer, l *launched) error {
	added, _, _, _ := o.counts()
	if _, err := e.deleteClaims(ctx, ns, e.opts.Claims); err != nil {
		return err
	}
	if err := o.waitUntil(ctx, e.runTimeout(), l.alive, func(_, gone, _, _ int) bool { return gone >= added }); err != nil {
		return fmt.Errorf("cleaning up %s: %w", ns, err)
	}
	klog.FromContext(ctx).V(2).Info("Cleaned up", "namespace", ns)
	return nil
}
