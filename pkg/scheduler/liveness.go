package scheduler

import (
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
)

// LivenessSource tells whether a CSI driver is live on a node, from the
// heartbeat Leases csi-node-publisher renews (limits.Liveness implements
// it). known is false for a node without a heartbeat: such a node counts
// as live. Implementations are safe for concurrent use and answer in O(1)
// of the number of nodes.
type LivenessSource interface {
	Live(driver, node string, now time.Time) (live bool, silentFor time.Duration, known bool)
}

// HeartbeatInformer returns an informer factory of its own over the
// driver heartbeat Leases only (limits.LeaseListOptions: the apiserver
// filters by label, so the kubelets' node Leases never arrive), in
// namespace (all namespaces when empty), its Lease informer carrying the
// limits.AddLeaseIndexer index, and the Liveness over it. The caller
// starts the factory. It is never the scheduler's shared factory: that one
// would watch every Lease of the cluster.
func HeartbeatInformer(client kubernetes.Interface, namespace string) (informers.SharedInformerFactory, cache.SharedIndexInformer, *limits.Liveness, error) {
	opts := []informers.SharedInformerOption{informers.WithTweakListOptions(limits.LeaseListOptions)}
	if namespace != "" {
		opts = append(opts, informers.WithNamespace(namespace))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
	inf := factory.Coordination().V1().Leases().Informer()
	if err := limits.AddLeaseIndexer(inf); err != nil {
		return nil, nil, nil, err
	}
	lv, err := limits.NewLiveness(inf.GetIndexer())
	if err != nil {
		return nil, nil, nil, err
	}
	return factory, inf, lv, nil
}

// filterLiveness rejects a node whose driver has a heartbeat that expired:
// the driver crashed or hangs there, so a volume selected for the node would
// never be provisioned (a node-local driver) or mounted.
func (c *Core) filterLiveness(node string) *Status {
	if c.l.Liveness == nil {
		return nil
	}
	live, silent, known := c.l.Liveness.Live(c.cfg.Driver, node, c.now())
	if !known || live {
		return nil
	}
	return unresolvable(ReasonDriverNotLive, "CSI driver %s on node %s has not renewed its heartbeat for %s",
		c.cfg.Driver, node, silent.Round(time.Second))
}
