// Command kubectl-csi_topology explains why a claim of a CSI driver is
// Pending, or what decided where a bound one went: `kubectl csi-topology
// explain pvc/NAME` as a kubectl plugin (the binary on PATH), or the same
// arguments to the binary itself. It only reads the cluster. See
// docs/troubleshooting.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/explain"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

const usage = `Explain where a claim of a CSI driver can go and what stops it.

Usage:
  kubectl csi-topology explain pvc/NAME [-n NAMESPACE] [-o text|json]
  kubectl csi-topology explain pod/NAME [-n NAMESPACE] [-o text|json]
  kubectl csi-topology explain pvc --all [-n NAMESPACE] [-o text|json]
  kubectl-csi_topology explain ...   (the same, as a plain binary)

It only reads the cluster (get and list); a read that RBAC refuses is named,
with the rule that would allow it, and the explanation goes on without it.

Flags:
`

type config struct {
	kubeconfig, context, namespace, output string
	opts                                   explain.Options
	timeout                                time.Duration
	showVersion, all                       bool
	args                                   []string
}

// parseArgs parses the command line; help goes to out.
func parseArgs(args []string, out io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("kubectl-csi_topology", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config), as kubectl.")
	fs.StringVar(&c.context, "context", "", "The kubeconfig context to use (default: its current context).")
	fs.StringVarP(&c.namespace, "namespace", "n", "", "Namespace of the claim or pod (default: the context's namespace, else \"default\").")
	fs.StringVarP(&c.output, "output", "o", "text", "Output format: text (the chain and one conclusion line) or json.")
	fs.StringVar(&c.opts.LeaseNamespace, "lease-namespace", "", "Namespace of the provisioner's leader-election Lease (its --leader-election-namespace); empty searches every namespace.")
	fs.StringVar(&c.opts.HeartbeatNamespace, "heartbeat-namespace", "", "Namespace of the driver's heartbeat Leases (csi-node-publisher's --lease-namespace); empty reads every namespace.")
	fs.DurationVar(&c.timeout, "request-timeout", 30*time.Second, "How long the whole explanation may take.")
	fs.BoolVar(&c.all, "all", false, "With \"explain pvc\": explain every claim of the namespace that is not bound, grouped by cause.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.args = fs.Args()
	if c.output != "text" && c.output != "json" {
		return c, fmt.Errorf("--output must be text or json, not %q", c.output)
	}
	return c, nil
}

// target splits "explain pvc/NAME" (or "explain pvc NAME") into kind and name.
func target(args []string) (kind, name string, err error) {
	if len(args) == 0 || args[0] != "explain" {
		return "", "", errors.New("usage: kubectl csi-topology explain pvc/NAME | pod/NAME (see --help)")
	}
	rest := args[1:]
	switch {
	case len(rest) == 1 && strings.Contains(rest[0], "/"):
		kind, name, _ = strings.Cut(rest[0], "/")
	case len(rest) == 2:
		kind, name = rest[0], rest[1]
	default:
		return "", "", errors.New("explain takes one object: pvc/NAME or pod/NAME")
	}
	switch {
	case isClaimKind(kind):
		return "pvc", name, nil
	case strings.EqualFold(kind, "pod") || strings.EqualFold(kind, "pods") || strings.EqualFold(kind, "po"):
		return "pod", name, nil
	}
	return "", "", fmt.Errorf("explain takes a pvc or a pod, not %q", kind)
}

// client loads the kubeconfig as kubectl does and returns a clientset and
// the namespace to use.
// client builds the clientset and, in c.opts, the VolumeSnapshot client
// (restores are judged by where their snapshot's volume is).
func client(c *config) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	ns := c.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("namespace from kubeconfig: %w", err)
		}
	}
	cs, err := kubeclient.New(rc, 50, 100, "kubectl-csi_topology/"+version)
	if err != nil {
		return nil, "", err
	}
	snaps := rest.CopyConfig(rc)
	snaps.QPS, snaps.Burst, snaps.UserAgent = 50, 100, "kubectl-csi_topology/"+version
	if c.opts.Snapshots, err = snapclientset.NewForConfig(snaps); err != nil {
		return nil, "", fmt.Errorf("VolumeSnapshot client: %w", err)
	}
	return cs, ns, nil
}

func run(ctx context.Context, c config, stdout io.Writer) error {
	if c.all {
		return runAll(ctx, c, stdout)
	}
	kind, name, err := target(c.args)
	if err != nil {
		return err
	}
	cs, ns, err := client(&c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var reports []*explain.Report
	if kind == "pod" {
		reports, err = explain.Pod(ctx, cs, ns, name, c.opts)
	} else {
		var r *explain.Report
		r, err = explain.Claim(ctx, cs, ns, name, c.opts)
		reports = []*explain.Report{r}
	}
	if err != nil {
		return err
	}
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if kind == "pod" {
			return enc.Encode(reports)
		}
		return enc.Encode(reports[0])
	}
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := explain.WriteText(stdout, r); err != nil {
			return err
		}
	}
	return nil
}

// runAll explains every claim of the namespace that is not bound.
func runAll(ctx context.Context, c config, stdout io.Writer) error {
	if len(c.args) != 2 || c.args[0] != "explain" || !isClaimKind(c.args[1]) {
		return errors.New("--all takes \"explain pvc\" without a name")
	}
	cs, ns, err := client(&c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sum, err := explain.Namespace(ctx, cs, ns, c.opts)
	if err != nil {
		return err
	}
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	return explain.WriteSummary(stdout, sum)
}

func isClaimKind(kind string) bool {
	switch strings.ToLower(kind) {
	case "pvc", "pvcs", "persistentvolumeclaim", "persistentvolumeclaims":
		return true
	}
	return false
}

func main() {
	c, err := parseArgs(os.Args[1:], os.Stdout)
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if c.showVersion {
		fmt.Println("kubectl-csi_topology", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, c, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
