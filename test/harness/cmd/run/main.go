// Command run is `make run`: it starts the local control plane, deploys the
// mock driver (3 zones x 2 nodes) and csi-provisioner, applies examples/
// (a WaitForFirstConsumer class and a 3-replica StatefulSet spread across
// zones), waits until every claim is Bound and prints where each landed.
// It then stays up until Ctrl-C, or exits with --once. With --nodes=kubelet
// (make run NODES=kubelet, as root) it runs the same job on three real
// nodes (test/harness/kubeletnode): deploy/'s mock overlay installed as pods, the
// StatefulSet's pods really started, each writing to its volume and reading
// it back (the table's READ BACK column).
//
// `make run` builds it into bin/ and execs it with --bin-dir=bin, so that it
// is make's child. Ctrl-C, SIGINT or SIGTERM to it or to make, or make's
// death, stop the cluster and remove its temp dir (see watchParent for how
// it learns about a SIGINT sent to make alone).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

type options struct {
	once    bool
	timeout time.Duration
	binDir  string
	// nodes is "" (fake nodes, the driver as processes) or "kubelet"
	// (real nodes, deploy/ installed as pods).
	nodes string
}

func main() {
	var o options
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	klog.InitFlags(fs)
	fs.BoolVar(&o.once, "once", false, "Exit after printing the table (for scripts).")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "How long to wait for every claim to be Bound.")
	fs.StringVar(&o.binDir, "bin-dir", "", "The project's binaries (make build's bin/); by default they are built into the cluster's temp dir.")
	fs.StringVar(&o.nodes, "nodes", "", `"kubelet": run on 3 real nodes (needs root), deploy/'s mock overlay as pods, each pod reading its volume back.`)
	_ = fs.Parse(os.Args[1:])
	if o.nodes != "" && o.nodes != "kubelet" {
		fmt.Fprintf(os.Stderr, "make run: NODES=%s: only NODES=kubelet is known\n", o.nodes)
		os.Exit(2)
	}
	if o.binDir != "" {
		abs, err := filepath.Abs(o.binDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "make run:", err)
			os.Exit(2)
		}
		o.binDir = abs
	}

	interrupted, err := watchParent(notifyContext(context.Background()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
	// On an interrupt the builds this process runs are interrupted first,
	// then everything else sees the end of ctx.
	ctx, cancel := context.WithCancel(context.Background())
	groupStopped := make(chan struct{})
	go func() {
		<-interrupted.Done()
		interruptGroup(ctx, 5*time.Second)
		cancel()
		close(groupStopped)
	}()
	removeGoTemp, err := goTempDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
	err = run(ctx, o)
	var stop stopped
	if errors.As(context.Cause(interrupted), &stop) {
		<-groupStopped
		removeGoTemp()
		fmt.Fprintf(os.Stderr, "make run: stopped (%v)\n", stop)
		signal.Reset(stop.sig)
		if !signal.Ignored(stop.sig) && syscall.Kill(os.Getpid(), stop.sig) == nil {
			// The Go runtime's handler, on another thread, ends the
			// process by the signal; bounded, in case it does not.
			<-time.After(5 * time.Second)
		}
		os.Exit(128 + int(stop.sig))
	}
	removeGoTemp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.nodes == "kubelet" {
		return runOnKubelets(ctx, o)
	}
	logger := klog.FromContext(ctx)
	fmt.Println("Starting the local control plane (the first run builds it: a few minutes)...")
	cluster, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		return err
	}
	fmt.Printf("Control plane up in %s.\n", cluster.Dir)
	defer func() {
		fmt.Println("Stopping the control plane...")
		if err := cluster.Stop(); err != nil {
			logger.Error(err, "Stopping the control plane")
		}
	}()
	// The components' logs explain a failure, not an interrupt.
	fail := func(err error) error {
		if ctx.Err() == nil {
			cluster.DumpLogs(os.Stderr, 20)
		}
		return err
	}
	env, err := lab.Setup(ctx, cluster, lab.Config{Zones: []string{"z1", "z2", "z3"}, NodesPerZone: 2, CapacityBytes: 100 << 30, BinDir: o.binDir})
	if err != nil {
		return fail(err)
	}
	for _, f := range []string{"storageclass.yaml", "statefulset.yaml"} {
		if err := cluster.ApplyFile(ctx, filepath.Join(cluster.RepoRoot, "examples", f), false); err != nil {
			return fail(err)
		}
	}
	fmt.Println("Applied examples/: StorageClass mock-zonal and StatefulSet web (3 replicas, one per zone).")
	rows, err := waitBound(ctx, cluster, env.Nodes, o.timeout)
	if err != nil {
		return fail(err)
	}
	printTable(os.Stdout, rows)
	return stayUp(ctx, cluster, o)
}

type row struct {
	pvc, pod, node, zone, pv, affinity string
	seconds                            float64
	// readBack is what the pod read from its volume (real nodes only).
	readBack string
}

// waitBound waits until every claim of the example StatefulSet is Bound and
// its pod is on a node, measuring each claim's time from creation to Bound;
// zones are the nodes' zones by name.
func waitBound(ctx context.Context, cluster *controlplane.Cluster, zones map[string]string, timeout time.Duration) ([]row, error) {
	client := cluster.Client
	boundAt := map[string]time.Time{}
	var rows []row
	err := cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvcs, err := client.CoreV1().PersistentVolumeClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		rows = rows[:0]
		for _, pvc := range pvcs.Items {
			if !strings.HasPrefix(pvc.Name, "data-web-") {
				continue
			}
			if pvc.Status.Phase != v1.ClaimBound {
				return false, nil
			}
			if _, ok := boundAt[pvc.Name]; !ok {
				boundAt[pvc.Name] = time.Now()
			}
			pod, err := client.CoreV1().Pods("default").Get(ctx, "web-"+strings.TrimPrefix(pvc.Name, "data-web-"), metav1.GetOptions{})
			if err != nil || pod.Spec.NodeName == "" {
				return false, nil
			}
			pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			rows = append(rows, row{
				pvc: pvc.Name, pod: pod.Name, node: pod.Spec.NodeName, zone: zones[pod.Spec.NodeName], pv: pv.Name,
				affinity: affinity(pv), seconds: boundAt[pvc.Name].Sub(pvc.CreationTimestamp.Time).Seconds(),
			})
		}
		return len(rows) == 3, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the StatefulSet's claims to be Bound: %w", err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].pvc < rows[j].pvc })
	return rows, nil
}

func affinity(pv *v1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return "(none)"
	}
	var terms []string
	for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		var exprs []string
		for _, e := range t.MatchExpressions {
			exprs = append(exprs, fmt.Sprintf("%s %s %s", strings.TrimPrefix(e.Key, "topology.mock.csi.example.com/"), e.Operator, strings.Join(e.Values, ",")))
		}
		terms = append(terms, strings.Join(exprs, " && "))
	}
	return strings.Join(terms, " || ")
}

// printTable prints where each claim landed; with real nodes (a row with
// readBack) a READ BACK column says what each pod read from its volume.
func printTable(out io.Writer, rows []row) {
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	readBack := slices.ContainsFunc(rows, func(r row) bool { return r.readBack != "" })
	header := "PVC\tNODE\tZONE\tPV\tNODE AFFINITY\tSECONDS TO BOUND"
	if readBack {
		header += "\tREAD BACK"
	}
	fmt.Fprintln(w, header)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%.1f", r.pvc, r.node, r.zone, r.pv, r.affinity, r.seconds)
		if readBack {
			line += "\t" + r.readBack
		}
		fmt.Fprintln(w, line)
	}
	_ = w.Flush()
}
