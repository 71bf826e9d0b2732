package scheduler

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
)

// LivenessSource tells whether a CSI driver is live on a node, from the
// heartbeat Leases csi-node-publisher renews (heartbeat.Liveness implements
// it). known is false for a node without a heartbeat: such a node counts
// as live. Implementations are safe for concurrent use and answer in O(1)
// of the number of nodes.
type LivenessSource interface {
	Live(driver, node string, now time.Time) (live bool, silentFor time.Duration, known bool)
}

// HeartbeatInformer returns an informer factory of its own over the
// driver heartbeat Leases only (heartbeat.LeaseListOptions: the apiserver
// filters by label, so the kubelets' node Leases never arrive), in
// namespace (all namespaces when empty), its Lease informer carrying the
// heartbeat.AddLeaseIndexer index, and the Liveness over it. The caller
// starts the factory. It is never the scheduler's shared factory: that one
// would watch every Lease of the cluster.
func HeartbeatInformer(client kubernetes.Interface, namespace string) (informers.SharedInformerFactory, cache.SharedIndexInformer, *heartbeat.Liveness, error) {
	opts := []informers.SharedInformerOption{informers.WithTweakListOptions(heartbeat.LeaseListOptions)}
	if namespace != "" {
		opts = append(opts, informers.WithNamespace(namespace))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
	inf := factory.Coordination().V1().Leases().Informer()
	if err := heartbeat.AddLeaseIndexer(inf); err != nil {
		return nil, nil, nil, err
	}
	lv, err := heartbeat.NewLiveness(inf.GetIndexer())
	if err != nil {
		return nil, nil, nil, err
	}
	return factory, inf, lv, nil
}

// HeartbeatAPI follows the heartbeat Leases of HeartbeatInformer's factory
// as an optional API: the factory is started once this client may list
// them there (a Role may grant that later, or the namespace may be made
// later), and until then every node counts as live, as the log says once.
// Run the API instead of starting the factory.
func HeartbeatAPI(client kubernetes.Interface, namespace string, factory informers.SharedInformerFactory) *optionalapi.API {
	where := "namespace " + namespace
	if namespace == "" {
		where = "all namespaces"
	}
	inf := factory.Coordination().V1().Leases().Informer()
	return optionalapi.New(optionalapi.Config{
		What:    "driver heartbeat Leases (coordination.k8s.io/v1) in " + where,
		Without: "every node counts as live",
		Probe: func(ctx context.Context) error {
			o := metav1.ListOptions{Limit: 1}
			heartbeat.LeaseListOptions(&o)
			_, err := client.CoordinationV1().Leases(namespace).List(ctx, o)
			return err
		},
		Start:     func(ctx context.Context) { factory.Start(ctx.Done()) },
		HasSynced: inf.HasSynced,
	})
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
