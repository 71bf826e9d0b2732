package kubeletnode

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

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// Nodes are real nodes added to a cluster by AddNodes.
type Nodes struct {
	// Nodes in the order of their names.
	Nodes []*Node
	// Images are the images every node has.
	Images Images
	// Dir holds the nodes' directories and the images.
	Dir string
}

// AddNodes checks the host (CheckHost: it fails, saying why, where real
// nodes cannot run), builds or reuses the node binaries and the images
// (the lab's pause and rwcheck, and the project's commands in
// projectImages), and starts opts.Count nodes on c, each Ready when it
// returns. On error what was started is stopped. Call Stop before the
// cluster's Stop.
func AddNodes(ctx context.Context, c *controlplane.Cluster, opts Options, projectImages ...string) (ns *Nodes, err error) {
	if len(opts.Names) != 0 {
		opts.Count = len(opts.Names)
	}
	if opts.Count <= 0 {
		opts.Count = 1
	}
	if opts.NamePrefix == "" {
		opts.NamePrefix = "real-node-"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	host, err := CheckHost(ctx)
	if err != nil {
		return nil, fmt.Errorf("this host cannot run real nodes: %w", err)
	}
	bins, err := BuildBinaries(ctx, c.RepoRoot)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "csitp-nodes-")
	if err != nil {
		return nil, err
	}
	ns = &Nodes{Dir: dir}
	defer func() {
		if err != nil {
			_ = ns.Stop()
			ns = nil
		}
	}()
	if ns.Images, err = BuildImages(ctx, c.RepoRoot, filepath.Join(dir, "images"), projectImages...); err != nil {
		return ns, err
	}
	for i := 1; i <= opts.Count; i++ {
		name := opts.NamePrefix + strconv.Itoa(i)
		if len(opts.Names) != 0 {
			name = opts.Names[i-1]
		}
		n, err := newNode(c, bins, host, dir, name, opts.Labels)
		if err != nil {
			return ns, err
		}
		ns.Nodes = append(ns.Nodes, n)
		if err := n.start(ctx, ns.Images, opts.ReadyTimeout); err != nil {
			return ns, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	klog.FromContext(ctx).Info("Real nodes Ready", "count", len(ns.Nodes))
	return ns, nil
}

// TagImage gives, on every node, the image src (a reference as a pod names
// it, e.g. Images.Ref("mock-driver")) the reference dst as well, e.g. the
// name a manifest uses. Pods find it under either with imagePullPolicy
// IfNotPresent or Never.
func (ns *Nodes) TagImage(ctx context.Context, src, dst string) error {
	for _, n := range ns.Nodes {
		if _, err := n.Ctr(ctx, "images", "tag", "--force", normalize(src), normalize(dst)); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

// normalize is a reference as containerd's CRI stores it: a name without a
// registry is on docker.io.
func normalize(ref string) string {
	if first, _, ok := strings.Cut(ref, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	return "docker.io/" + ref
}

// Stop stops every node (Node.Stop), removes the cgroups the nodes created
// above theirs, and Dir.
func (ns *Nodes) Stop() error {
	var errs []error
	var parents []string
	for _, n := range ns.Nodes {
		parents = append(parents, n.cgroupParents...)
		if err := n.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		}
	}
	// A node's parents held the other nodes' cgroups while it stopped.
	removeParents(parents)
	if err := os.RemoveAll(ns.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
