package nodepublisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// ErrLabelCollision is returned when the node already carries a topology
// label with another value than the driver reports. Nothing is overwritten.
var ErrLabelCollision = errors.New("topology label collision")

// DriverClient is the subset of the CSI Identity and Node services the
// publisher calls; safe for concurrent use.
type DriverClient interface {
	GetPluginInfo(ctx context.Context, in *csi.GetPluginInfoRequest, opts ...grpc.CallOption) (*csi.GetPluginInfoResponse, error)
	Probe(ctx context.Context, in *csi.ProbeRequest, opts ...grpc.CallOption) (*csi.ProbeResponse, error)
	NodeGetInfo(ctx context.Context, in *csi.NodeGetInfoRequest, opts ...grpc.CallOption) (*csi.NodeGetInfoResponse, error)
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// NodeName is the Node (and CSINode) this publisher serves. Required.
	NodeName string
	// ReservedVolumes is subtracted from the driver's max_volumes_per_node.
	ReservedVolumes int64
	// ResyncPeriod re-runs NodeGetInfo and re-publishes; default 1m.
	ResyncPeriod time.Duration
	// ProbeInterval probes the driver to notice restarts; default 5s.
	ProbeInterval time.Duration
	// CleanupOnExit removes the driver's entry when Run ends.
	CleanupOnExit bool
	// CallTimeout bounds each CSI and API call; default 10s.
	CallTimeout time.Duration
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = time.Minute
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 5 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	return c
}

// Publisher keeps one node's CSINode entry for a driver current, labels the
// node with the driver's topology segment and maintains the node ID
// annotation, as kubelet's plugin registration does, and coexists with it:
// when the values already match it writes nothing, it never touches other
// drivers' entries, and it never overwrites a label with another value.
type Publisher struct {
	cfg     PublisherConfig
	client  kubernetes.Interface
	driver  DriverClient
	metrics *PublisherMetrics

	mu        sync.Mutex
	lastErr   error
	driverUp  bool
	published *storagev1.CSINodeDriver
}

// NewPublisher returns a Publisher; metrics may be nil.
func NewPublisher(cfg PublisherConfig, client kubernetes.Interface, driver DriverClient, metrics *PublisherMetrics) (*Publisher, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("a node name is required (--node-name or NODE_NAME)")
	}
	if cfg.ReservedVolumes < 0 {
		return nil, errors.New("--reserved-volumes must not be negative")
	}
	return &Publisher{cfg: cfg.withDefaults(), client: client, driver: driver, metrics: metrics}, nil
}

// Healthy returns nil while the driver answers and the last publish worked.
func (p *Publisher) Healthy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.driverUp {
		return errors.New("CSI driver unreachable; keeping the last published entry")
	}
	return p.lastErr
}

// Published returns the entry last written or confirmed, or nil.
func (p *Publisher) Published() *storagev1.CSINodeDriver {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

// Run publishes now and then every ResyncPeriod, and at once when the
// driver comes back after being unreachable, until ctx is done. Transient
// failures (driver or apiserver unreachable, conflicts) are retried; a label
// collision or a negative count ends Run with the error. With CleanupOnExit
// the entry is removed when ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	resync := time.NewTicker(p.cfg.ResyncPeriod)
	defer resync.Stop()
	probe := time.NewTicker(p.cfg.ProbeInterval)
	defer probe.Stop()
	retryDelay := time.Second
	var retry <-chan time.Time
	publish := func() error {
		err := p.PublishOnce(ctx)
		if errors.Is(err, ErrLabelCollision) || errors.Is(err, ErrNegativeCount) {
			return err
		}
		if err != nil {
			logger.Error(err, "Publishing the CSINode entry failed; retrying", "retryIn", retryDelay)
			retry = time.After(retryDelay)
			retryDelay = min(2*retryDelay, p.cfg.ResyncPeriod)
		} else {
			retry, retryDelay = nil, time.Second
		}
		return nil
	}
	if err := publish(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			if p.cfg.CleanupOnExit {
				return p.cleanup(context.WithoutCancel(ctx))
			}
			return nil
		case <-resync.C:
		case <-retry:
		case <-probe.C:
			if p.probe(ctx) {
				continue
			}
		}
		if err := publish(); err != nil {
			return err
		}
	}
}

// probe checks the driver; it returns true when nothing needs publishing
// (the driver is up and was up, or it is down).
func (p *Publisher) probe(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	_, err := p.driver.Probe(cctx, &csi.ProbeRequest{})
	p.mu.Lock()
	wasUp := p.driverUp
	p.driverUp = err == nil
	p.mu.Unlock()
	p.metrics.setDriverUp(err == nil)
	if err != nil {
		if wasUp {
			klog.FromContext(ctx).Error(err, "CSI driver unreachable; keeping the last published entry")
		}
		return true
	}
	return wasUp
}

// PublishOnce reads the driver and writes what differs: node labels and
// annotation (one patch), and the CSINode entry.
func (p *Publisher) PublishOnce(ctx context.Context) (err error) {
	defer func() {
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		p.metrics.observePublish(err)
	}()
	logger := klog.FromContext(ctx)
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	pi, err := p.driver.GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
	if err == nil {
		var info *csi.NodeGetInfoResponse
		if info, err = p.driver.NodeGetInfo(cctx, &csi.NodeGetInfoRequest{}); err == nil {
			p.mu.Lock()
			p.driverUp = true
			p.mu.Unlock()
			p.metrics.setDriverUp(true)
			logger.V(4).Info("NodeGetInfo", "response", protosanitizer.StripSecrets(info))
			return p.publish(ctx, pi.GetName(), info)
		}
	}
	p.mu.Lock()
	p.driverUp = false
	p.mu.Unlock()
	p.metrics.setDriverUp(false)
	return fmt.Errorf("reading the CSI driver: %w", err)
}

func (p *Publisher) publish(ctx context.Context, driver string, info *csi.NodeGetInfoResponse) error {
	logger := klog.FromContext(ctx)
	entry, err := DriverEntry(driver, info, p.cfg.ReservedVolumes)
	if err != nil {
		return err
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %q: %w", p.cfg.NodeName, err)
	}
	if err := p.patchNode(ctx, node, driver, info); err != nil {
		return err
	}
	changed := false
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var err error
		changed, err = p.writeEntry(ctx, node, entry)
		return err
	})
	if err != nil {
		return fmt.Errorf("writing CSINode %q: %w", p.cfg.NodeName, err)
	}
	p.mu.Lock()
	p.published = &entry
	p.mu.Unlock()
	p.metrics.setCount(entry)
	if changed {
		logger.Info("Published CSINode entry", "node", p.cfg.NodeName, "driver", driver, "nodeID", entry.NodeID,
			"topologyKeys", entry.TopologyKeys, "allocatable", allocatableCount(entry))
	} else {
		logger.V(4).Info("CSINode entry already current", "node", p.cfg.NodeName, "driver", driver)
	}
	return nil
}

// patchNode adds missing topology labels and the node ID annotation. A label
// that exists with another value is a collision: reported, not overwritten.
func (p *Publisher) patchNode(ctx context.Context, node *v1.Node, driver string, info *csi.NodeGetInfoResponse) error {
	labels := map[string]string{}
	for k, v := range info.GetAccessibleTopology().GetSegments() {
		cur, ok := node.Labels[k]
		switch {
		case !ok:
			labels[k] = v
		case cur != v:
			msg := fmt.Sprintf("node label %s=%s collides with the value %q that CSI driver %s reports; not overwriting it", k, cur, v, driver)
			p.metrics.observeCollision()
			p.reportCollision(ctx, node, msg)
			return fmt.Errorf("%w: %s", ErrLabelCollision, msg)
		}
	}
	ann, annChanged, err := nodeIDAnnotation(node.Annotations[AnnNodeID], driver, info.GetNodeId())
	if err != nil {
		return err
	}
	if len(labels) == 0 && !annChanged {
		return nil
	}
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if annChanged {
		meta["annotations"] = map[string]string{AnnNodeID: ann}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling node %q: %w", node.Name, err)
	}
	klog.FromContext(ctx).Info("Labelled node with its topology segment", "node", node.Name, "labels", labels)
	return nil
}

// reportCollision posts a Warning Event on the Node synchronously: the
// collision ends the process, which an asynchronous recorder would not
// survive.
func (p *Publisher) reportCollision(ctx context.Context, node *v1.Node, msg string) {
	now := metav1.Now()
	_, err := p.client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		Reason:         "TopologyLabelCollision",
		Message:        msg,
		Type:           v1.EventTypeWarning,
		Source:         v1.EventSource{Component: "csi-node-publisher", Host: node.Name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Posting the collision Event failed", "node", node.Name)
	}
}

// writeEntry creates the CSINode (owned by the Node) or patches its entry
// for the driver; it writes nothing when the entry already matches. The
// patch is a strategic merge on the drivers list (merge key: name), so other
// drivers' entries are untouched, and carries the resourceVersion it was
// computed from, so a concurrent writer (kubelet) makes it fail with a
// conflict and it is retried on fresh data.
func (p *Publisher) writeEntry(ctx context.Context, node *v1.Node, entry storagev1.CSINodeDriver) (bool, error) {
	csiNodes := p.client.StorageV1().CSINodes()
	cur, err := csiNodes.Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = csiNodes.Create(ctx, &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{
				Name: node.Name,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{entry}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, apierrors.NewConflict(storagev1.Resource("csinodes"), node.Name, err)
		}
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	for _, d := range cur.Spec.Drivers {
		if d.Name == entry.Name && sameEntry(d, entry) {
			return false, nil
		}
	}
	var allocatable any // JSON null removes a count the driver no longer reports
	if c := allocatableCount(entry); c != nil {
		allocatable = map[string]int32{"count": *c}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]string{"resourceVersion": cur.ResourceVersion},
		"spec": map[string]any{"drivers": []map[string]any{{
			"name": entry.Name, "nodeID": entry.NodeID, "topologyKeys": entry.TopologyKeys, "allocatable": allocatable,
		}}},
	})
	if err != nil {
		return false, err
	}
	_, err = csiNodes.Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err == nil, err
}

// cleanup removes the driver's entry (only ours) from the CSINode.
func (p *Publisher) cleanup(ctx context.Context) error {
	entry := p.Published()
	if entry == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := p.client.StorageV1().CSINodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(withoutEntry(cur.Spec.Drivers, entry.Name)) == len(cur.Spec.Drivers) {
			return nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]string{"resourceVersion": cur.ResourceVersion},
			"spec":     map[string]any{"drivers": []map[string]string{{"name": entry.Name, "$patch": "delete"}}},
		})
		if err != nil {
			return err
		}
		_, err = p.client.StorageV1().CSINodes().Patch(ctx, p.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing the %s entry from CSINode %q: %w", entry.Name, p.cfg.NodeName, err)
	}
	klog.FromContext(ctx).Info("Removed CSINode entry on exit", "node", p.cfg.NodeName, "driver", entry.Name)
	return nil
}
