package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// fleet is the nodes scenario's part of a size's cluster, prepared once:
// the nodes that run an instance (spread evenly over the cluster), each
// with a node-local mock driver served in this process on its own socket,
// and, once the central reference ran, one controller driver with a
// segment per instance node.
//
// The drivers run in the bench's process, one goroutine set and one gRPC
// server each: the mock driver's real code over real unix sockets, without
// a process per node. 100 mock-driver processes would add about 2 GB of
// RSS and 100 Go runtimes to a machine that measures 100 provisioners; the
// drivers' CPU is not a figure of the scenario.
type fleet struct {
	nodes       []string
	sockets     []string
	drivers     []*driver.Driver
	kubeconfig  string // csi-node-provisioner's
	central     *driver.Driver
	centralSock string
	// ctx is the drivers' context; stop ends it.
	ctx     context.Context
	stop    context.CancelFunc
	done    chan error
	running int
}

// instanceNodes returns n nodes of a cluster of size nodes, spread evenly.
func instanceNodes(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = nodeName(i * size / n)
	}
	return out
}

// prepareFleet creates the node-local class, makes the instance nodes'
// CSINode entries the node-local driver's, grants the node deployment's
// RBAC and starts one node-local driver per instance node, once per size.
func (e *env) prepareFleet(ctx context.Context, instances int) (*fleet, error) {
	if e.fleet != nil {
		return e.fleet, nil
	}
	f := &fleet{nodes: instanceNodes(instances, e.size), done: make(chan error, instances+1)}
	if err := e.createNodeLocalClass(ctx); err != nil {
		return nil, err
	}
	err := parallel(ctx, instances, 16, func(ctx context.Context, i int) error { return e.useHostnameKey(ctx, f.nodes[i]) })
	if err != nil {
		return nil, err
	}
	if f.kubeconfig, err = e.nodeKubeconfig(ctx); err != nil {
		return nil, err
	}
	// The drivers outlive the run's context: they stop with the cluster.
	f.ctx, f.stop = context.WithCancel(klog.NewContext(context.Background(), klog.FromContext(ctx)))
	e.fleet = f
	for _, node := range f.nodes {
		sock := filepath.Join(e.cluster.Dir, "nd-"+strings.TrimPrefix(node, "bench-node-")+".sock")
		d, err := f.startDriver(f.ctx, driver.Config{Name: lab.DriverName, Endpoint: "unix://" + sock, Mode: driver.ModeBoth,
			NodeID: node, NodeTopology: map[string]string{hostnameKey: node},
			Segments: []driver.SegmentConfig{{Topology: map[string]string{hostnameKey: node}, CapacityBytes: 1 << 50}}})
		if err != nil {
			return nil, fmt.Errorf("node-local driver of %s: %w", node, err)
		}
		f.drivers, f.sockets = append(f.drivers, d), append(f.sockets, sock)
	}
	return f, nil
}

// centralDriver starts, once, the controller driver of the central
// reference: one segment per instance node, as a central driver of local
// storage would see them.
func (f *fleet) centralDriver(dir string) error {
	if f.central != nil {
		return nil
	}
	segs := make([]driver.SegmentConfig, len(f.nodes))
	for i, node := range f.nodes {
		segs[i] = driver.SegmentConfig{Topology: map[string]string{hostnameKey: node}, CapacityBytes: 1 << 50}
	}
	f.centralSock = filepath.Join(dir, "central-driver.sock")
	d, err := f.startDriver(f.ctx, driver.Config{Name: lab.DriverName, Endpoint: "unix://" + f.centralSock,
		Mode: driver.ModeController, Segments: segs})
	if err != nil {
		return fmt.Errorf("central driver: %w", err)
	}
	f.central = d
	return nil
}

// startDriver starts a mock driver in this process and waits until it
// serves.
func (f *fleet) startDriver(ctx context.Context, cfg driver.Config) (*driver.Driver, error) {
	d, err := driver.New(cfg)
	if err != nil {
		return nil, err
	}
	f.running++
	go func() { f.done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
		return d, nil
	case err := <-f.done:
		f.running--
		return nil, fmt.Errorf("mock driver stopped: %w", err)
	case <-time.After(30 * time.Second):
		return nil, errors.New("mock driver not serving after 30 s")
	}
}

// Stop stops the drivers and waits for them.
func (f *fleet) Stop() {
	if f == nil || f.stop == nil {
		return
	}
	f.stop()
	for ; f.running > 0; f.running-- {
		<-f.done
	}
}

// proc is a process of the cluster the nodes scenario measures from /proc.
type proc struct {
	name string
	pid  int
}

// coreProcess finds the control-plane process named comm (kube-apiserver,
// etcd) of this cluster: a child of this process whose command line names
// the cluster's directory.
func (e *env) coreProcess(comm string) (proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return proc{}, err
	}
	self := os.Getpid()
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != comm {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(self) {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), e.cluster.Dir) {
			return proc{name: comm, pid: pid}, nil
		}
	}
	return proc{}, fmt.Errorf("no %s of the cluster in %s among this process's children", comm, e.cluster.Dir)
}

// startInstances starts one process per (name, args, env) and waits until
// every one has logged that its informers have synced.
func (e *env) startInstances(ctx context.Context, binary string, specs []instanceSpec) ([]*controlplane.Process, error) {
	procs := make([]*controlplane.Process, 0, len(specs))
	for _, s := range specs {
		p, err := e.cluster.StartProcess(s.name, binary, s.args, s.env)
		if err != nil {
			stopAll(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	synced := make([]bool, len(procs))
	left := len(procs)
	err := e.cluster.WaitFor(ctx, e.runTimeout(), func(context.Context) (bool, error) {
		for i, p := range procs {
			if synced[i] {
				continue
			}
			found, err := logHas(p.LogPath(), syncedLine)
			if err != nil {
				return false, err
			}
			if found {
				synced[i] = true
				left--
			} else if p.Exited() {
				return false, fmt.Errorf("%s exited: %v (log %s)", p.Name, p.Wait(), p.LogPath())
			}
		}
		return left == 0, nil
	})
	if err != nil {
		stopAll(procs)
		return nil, fmt.Errorf("%d of %d instances never logged %q: %w", left, len(procs), syncedLine, err)
	}
	return procs, nil
}

// instanceSpec is how one provisioner process of the nodes scenario starts.
type instanceSpec struct {
	name      string
	args, env []string
}

// stopAll stops processes (SIGTERM, then SIGKILL after 15 s), all at once.
func stopAll(procs []*controlplane.Process) {
	done := make(chan struct{}, len(procs))
	for _, p := range procs {
		go func() { p.Stop(15 * time.Second); done <- struct{}{} }()
	}
	for range procs {
		<-done
	}
}

// exitedOne returns an error once one of procs has exited.
func exitedOne(procs []*controlplane.Process) error {
	for _, p := range procs {
		if p.Exited() {
			return fmt.Errorf("%s exited: %v (log %s)", p.Name, p.Wait(), p.LogPath())
		}
	}
	return nil
}
