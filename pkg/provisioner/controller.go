package provisioner

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/bindthrough"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/informercache"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	// Provisioner configures the Provisioner.
	Provisioner Config
	// WorkerThreads is the number of claims and volumes processed at once. Default 100.
	WorkerThreads int
	// RetryIntervalStart and RetryIntervalMax bound the exponential backoff of
	// failed provisions and deletions. Defaults 1s and 5m.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// ResyncPeriod of the informers. Default 15m.
	ResyncPeriod time.Duration
	// LeaderElection makes only the holder of a Lease provision.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease. Default: "default"; the
	// command sets the pod's namespace (kubeclient.ServiceAccountNamespace).
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election.
	// Defaults 15s, 10s and 5s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Capacity, when set, publishes CSIStorageCapacity objects.
	Capacity *capacity.Config
	// Metrics, when set, receives the provisioner's metrics.
	Metrics metrics.KubeRegistry
	// Sources says which data-source APIs the cluster serves.
	Sources SourcesConfig
	// DisableInFlightRecord switches off the durable in-flight record
	// (inflight.Finalizer, pkg/inflight). Unsafe: volumes can leak as they do
	// with upstream external-provisioner; it exists to show those leaks.
	DisableInFlightRecord bool
	// DriverStatus, when set, tells whether the driver answers
	// (driverconn.Monitor.Status); see Deps.DriverStatus.
	DriverStatus func() (connected bool, reason string)
	// BindThrough makes the provisioner bind each claim to its new PV
	// itself, as the PV controller would (pkg/bindthrough), with
	// WorkerThreads workers.
	BindThrough bool
	// DrainTimeout is how long Run, once its context ends, lets the
	// CreateVolume calls in flight finish before it stops (drain.go).
	// Default DefaultDrainTimeout.
	DrainTimeout time.Duration
}

func (c ControllerConfig) withDefaults() ControllerConfig {
	if c.WorkerThreads <= 0 {
		c.WorkerThreads = 100
	}
	if c.RetryIntervalStart <= 0 {
		c.RetryIntervalStart = time.Second
	}
	if c.RetryIntervalMax <= 0 {
		c.RetryIntervalMax = 5 * time.Minute
	}
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = 15 * time.Minute
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = 15 * time.Second
	}
	if c.RenewDeadline <= 0 {
		c.RenewDeadline = 10 * time.Second
	}
	if c.RetryPeriod <= 0 {
		c.RetryPeriod = 5 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	c.Provisioner.Node = c.Provisioner.Node.WithDefaults()
	return c
}

// Clients are the API clients of a Controller, each with its own client-side
// rate limit so that none starves another.
type Clients struct {
	// Work reads (informers) and writes PVs and claims.
	Work kubernetes.Interface
	// Events posts Events; may be Work.
	Events kubernetes.Interface
	// LeaderElection renews the Lease; may be Work. Used only with
	// ControllerConfig.LeaderElection.
	LeaderElection kubernetes.Interface
	// Capacity writes CSIStorageCapacity objects; may be Work. Used only
	// with ControllerConfig.Capacity.
	Capacity kubernetes.Interface
	// Binding writes bind-through's bindings (ControllerConfig.BindThrough);
	// may be Work.
	Binding kubernetes.Interface
	// Metadata, when set, watches Nodes as metadata only (labels are all the
	// provisioner reads of them); nil: Nodes come from Work, trimmed.
	Metadata metadata.Interface
}

// Controller runs a Provisioner inside the library's ProvisionController,
// with every informer from one shared informer factory.
type Controller struct {
	cfg     ControllerConfig
	clients Clients
	factory informers.SharedInformerFactory
	// nodes is the metadata-only Node informer, run beside the factory
	// (nil: Nodes are the factory's).
	nodes cache.SharedIndexInformer
	// nodeFactory, with node deployment, holds the informers of the
	// instance's own Node and CSINode (nil otherwise).
	nodeFactory informers.SharedInformerFactory
	// claimer takes immediate-binding claims for the node (node deployment
	// with ImmediateBinding; nil otherwise).
	claimer     *nodedeploy.Claimer
	provisioner *Provisioner
	lib         *controller.ProvisionController
	index       *topology.Index
	indexSynced []cache.InformerSynced

	capacity        *capacity.Publisher
	capacityFactory informers.SharedInformerFactory
	// libClaims and libVolumes are the informers the library watches.
	libClaims, libVolumes *replayInformer
	// leading is true while this replica provisions (always, once running,
	// without leader election).
	leading atomic.Bool
	sources *sourceWiring
	// recordKeeper clears the in-flight records of deleted claims; nil when the
	// record is off.
	recordKeeper *inflight.Keeper
	// binder binds claims to their new PVs (ControllerConfig.BindThrough;
	// nil otherwise).
	binder *bindthrough.Binder
}

// NewController wires a Provisioner for the driver behind csiClient.
func NewController(ctx context.Context, cfg ControllerConfig, clients Clients, csiClient ControllerClient) (*Controller, error) {
	clients = clients.withDefaults()
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	inf := newControllerInformers(cfg, clients)
	index := topology.NewIndex(cfg.Provisioner.DriverName)
	indexSynced, err := informercache.FeedIndex(index, inf.nodes, inf.csiNodes.Informer())
	if err != nil {
		return nil, err
	}
	capacity, capacityFactory := newCapacity(cfg, clients, csiClient, index, inf.factory)
	sources, err := wireSources(ctx, cfg, clients, inf.factory)
	if err != nil {
		return nil, err
	}
	deps, attachments, err := newDeps(cfg, clients, csiClient, inf, index, sources)
	if err != nil {
		return nil, err
	}
	if capacity != nil {
		if err := wireCapacity(cfg, capacity, &deps, index, inf.classes); err != nil {
			return nil, err
		}
	}
	if cfg.Metrics != nil {
		if err := informercache.RegisterMetrics(cfg.Metrics, inf.claims, inf.volumes); err != nil {
			return nil, err
		}
	}
	p, err := New(cfg.Provisioner, deps)
	if err != nil {
		return nil, err
	}
	if _, err := inf.claims.AddEventHandler(selectionHandler(p.selections)); err != nil {
		return nil, fmt.Errorf("watching claims: %w", err)
	}
	libClient := clients.Work
	var keeper *inflight.Keeper
	if p.records != nil {
		var recorder record.EventRecorder
		if keeper, recorder, err = newRecordKeeper(ctx, p, inf.claims, deps.ClaimVolumes, clients.Events, cfg.Metrics,
			recordGrace(cfg)); err != nil {
			return nil, err
		}
		libClient = withRecordGuard(libClient, p, recorder)
		if err := keeper.WatchVolumes(inf.volumes); err != nil {
			return nil, err
		}
	}
	libClaims, libVolumes, err := libraryInformers(inf)
	if err != nil {
		return nil, err
	}
	claimer, err := scopeToNode(cfg, clients, p, inf, libClaims, libVolumes)
	if err != nil {
		return nil, err
	}
	if attachments != nil {
		// A PV waiting for its detach is deleted as soon as it is detached.
		if _, err := attachments.AddEventHandler(attachmentGoneHandler(func(pv string) { libVolumes.replayKey(pv) })); err != nil {
			return nil, fmt.Errorf("watching VolumeAttachments: %w", err)
		}
	}
	opts := append(libraryOptions(cfg, inf, libClaims, libVolumes, deps.Retries), p.migration.libraryOptions(klog.FromContext(ctx))...)
	lib := controller.NewProvisionController(klog.FromContext(ctx), WithEventSink(libClient, clients.Events, deps.Decisions),
		cfg.Provisioner.DriverName, p, opts...)
	binder, err := newBinder(cfg, clients, inf, p.records != nil)
	if err != nil {
		return nil, err
	}
	var nodeInformer cache.SharedIndexInformer
	if inf.ownNodes {
		nodeInformer = inf.nodes
	}
	return &Controller{cfg: cfg, clients: clients, factory: inf.factory, nodes: nodeInformer, nodeFactory: inf.ownNodeFactory, claimer: claimer,
		provisioner: p, lib: lib, index: index, indexSynced: indexSynced, binder: binder,
		capacity: capacity, capacityFactory: capacityFactory, libClaims: libClaims, libVolumes: libVolumes, sources: sources, recordKeeper: keeper}, nil
}

// libraryInformers are the informers of claims and PVs the library is
// given (replayInformer); the PVs' holds the PV the library sent aside.
func libraryInformers(inf controllerInformers) (claims, volumes *replayInformer, err error) {
	claims, volumes = newReplayInformer(inf.claims, pendingClaim), newReplayInformer(inf.volumes, volumeToDelete)
	if err := volumes.holdSentAside(); err != nil {
		return nil, nil, fmt.Errorf("watching PVs: %w", err)
	}
	return claims, volumes, nil
}

// newBinder is the binder of cfg.BindThrough, on the controller's informers
// of claims and PVs (nil without it). With the in-flight record (records),
// the binding write of a claim also removes its record, which the keeper
// leaves to it for bindThroughRecordGrace (recordGrace): one write per
// volume less than the record's own removal.
func newBinder(cfg ControllerConfig, clients Clients, inf controllerInformers, records bool) (*bindthrough.Binder, error) {
	if !cfg.BindThrough {
		return nil, nil
	}
	var drop []string
	if records {
		drop = []string{inflight.Finalizer}
	}
	return bindthrough.New(bindthrough.Config{DriverName: cfg.Provisioner.DriverName, Client: clients.Binding,
		Volumes: inf.volumes, Claims: inf.claims, Workers: cfg.WorkerThreads, DropFinalizers: drop, RecordWait: bindThroughRecordGrace})
}

// bindThroughRecordGrace is how long, after a claim's PV is created, the
// in-flight record keeper leaves the record of a claim that is not bound
// yet to bind-through's binding write (inflight.KeeperConfig.BinderGrace).
// Past it (the binder lags, or RBAC refuses it), the keeper removes the
// record itself, at the cost of one more write.
const bindThroughRecordGrace = 30 * time.Second

// recordGrace is the keeper's BinderGrace for cfg: bindThroughRecordGrace
// with bind-through, else 0.
func recordGrace(cfg ControllerConfig) time.Duration {
	if cfg.BindThrough {
		return bindThroughRecordGrace
	}
	return 0
}

// withDefaults fills the clients left nil with Work.
func (c Clients) withDefaults() Clients {
	if c.Events == nil {
		c.Events = c.Work
	}
	if c.LeaderElection == nil {
		c.LeaderElection = c.Work
	}
	if c.Capacity == nil {
		c.Capacity = c.Work
	}
	if c.Binding == nil {
		c.Binding = c.Work
	}
	return c
}

// check refuses settings that cannot work together.
func (cfg ControllerConfig) check() error {
	if cfg.RetryIntervalMax < cfg.RetryIntervalStart {
		return fmt.Errorf("retry interval max %s is below retry interval start %s", cfg.RetryIntervalMax, cfg.RetryIntervalStart)
	}
	if cfg.Provisioner.Node != nil && cfg.LeaderElection {
		return fmt.Errorf("node deployment runs an instance on every node: leader election would stop all but one")
	}
	return nil
}

// controllerInformers are the informers NewController wires: claims, PVs
// and classes of one shared factory, and Nodes and CSINodes (of the
// instance's own node only with node deployment, from a factory of its
// own).
type controllerInformers struct {
	factory                  informers.SharedInformerFactory
	claims, volumes, classes cache.SharedIndexInformer
	nodes                    cache.SharedIndexInformer
	// ownNodes: nodes is run beside the factories (metadata only).
	ownNodes       bool
	csiNodes       storageinformers.CSINodeInformer
	ownNodeFactory informers.SharedInformerFactory
}

func newControllerInformers(cfg ControllerConfig, clients Clients) controllerInformers {
	nd := cfg.Provisioner.Node
	// Cached objects are trimmed to what the provisioner reads (Nodes to
	// their labels, CSINodes to the driver's entry): see informercache.TrimForDriver.
	trim := informercache.TrimForDriver(cfg.Provisioner.DriverName)
	transform := trim
	if nd != nil {
		transform = nd.Transform(informercache.TrimForCache)
	}
	var inf controllerInformers
	inf.factory = informers.NewSharedInformerFactoryWithOptions(clients.Work, cfg.ResyncPeriod, informers.WithTransform(transform))
	if nd != nil && nd.LabelSelection {
		nd.ScopeInformers(inf.factory, cfg.Provisioner.DriverName)
	}
	inf.claims = inf.factory.Core().V1().PersistentVolumeClaims().Informer()
	inf.volumes = inf.factory.Core().V1().PersistentVolumes().Informer()
	inf.classes = inf.factory.Storage().V1().StorageClasses().Informer()
	// With node deployment, the node's own Node and CSINode only.
	nodeFactory, nodeTweak := inf.factory, func(*metav1.ListOptions) {}
	if nd != nil {
		nodeTweak = nd.NodeFieldSelector
		inf.ownNodeFactory = informers.NewSharedInformerFactoryWithOptions(clients.Work, cfg.ResyncPeriod,
			informers.WithTransform(trim), informers.WithTweakListOptions(nodeTweak))
		nodeFactory = inf.ownNodeFactory
	}
	inf.nodes, inf.ownNodes = informercache.NewNodeInformer(clients.Metadata, nodeFactory, cfg.ResyncPeriod, nodeTweak)
	inf.csiNodes = nodeFactory.Storage().V1().CSINodes()
	return inf
}

// newCapacity returns the capacity publisher and the factory of its own
// objects, or nils without capacity publishing.
func newCapacity(cfg ControllerConfig, clients Clients, csiClient ControllerClient, index *topology.Index,
	factory informers.SharedInformerFactory) (*capacity.Publisher, informers.SharedInformerFactory) {
	if cfg.Capacity == nil {
		return nil, nil
	}
	cc := capacityConfig(cfg)
	// Only this provisioner's objects: with node deployment, every node's
	// instance has its own.
	selector := cc.Selector().String()
	capacityFactory := informers.NewSharedInformerFactoryWithOptions(clients.Capacity, cfg.ResyncPeriod,
		informers.WithNamespace(cc.Namespace), informers.WithTransform(informercache.TrimForCache),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	pub := capacity.NewPublisher(cc, clients.Capacity, csiClient, index,
		factory.Storage().V1().StorageClasses().Lister(), capacityFactory.Storage().V1().CSIStorageCapacities().Lister())
	return pub, capacityFactory
}

// capacityConfig completes cfg.Capacity (which must be set) with what the
// provisioner knows: the driver, the managed-by label of a node's
// instance, and the parameters CreateVolume gets, so that GetCapacity gets
// them too and a class Provision refuses gets no capacity objects.
func capacityConfig(cfg ControllerConfig) capacity.Config {
	cc := *cfg.Capacity
	cc.DriverName = cfg.Provisioner.DriverName
	if nd := cfg.Provisioner.Node; nd != nil {
		cc.ManagedBy = capacity.ManagedBy(nd.NodeName)
	}
	cc.DriverParameters = classparams.DriverParameters
	return cc
}

// newDeps gathers the Provisioner's dependencies; attachments is the
// VolumeAttachment informer for a driver that attaches (nil otherwise).
func newDeps(cfg ControllerConfig, clients Clients, csiClient ControllerClient, inf controllerInformers, index *topology.Index,
	sources *sourceWiring) (deps Deps, attachments cache.SharedIndexInformer, err error) {
	deps = Deps{
		Sources:   sources.sources,
		CSI:       csiClient,
		Secrets:   clients.Work.CoreV1(),
		CSINodes:  inf.csiNodes.Lister(),
		Classes:   inf.factory.Storage().V1().StorageClasses().Lister(),
		Index:     index,
		Decisions: NewDecisionLog(),
		// Only node deployment hands claims back for a silent driver.
		DriverStatus: cfg.DriverStatus,
	}
	if cfg.Metrics != nil {
		deps.Metrics = NewMetrics(cfg.Metrics)
	}
	if !cfg.DisableInFlightRecord {
		deps.ClaimPatcher = clients.Work.CoreV1()
	}
	deps.Retries = NewSlowRetries(workqueue.NewItemExponentialFailureRateLimiter(cfg.RetryIntervalStart, cfg.RetryIntervalMax), cfg.RetryIntervalMax)
	if deps.ClaimVolumes, err = NewClaimVolumeIndex(inf.volumes); err != nil {
		return Deps{}, nil, err
	}
	if cfg.Provisioner.SupportsAttach {
		attachments = inf.factory.Storage().V1().VolumeAttachments().Informer()
		if deps.Attachments, err = NewAttachmentIndex(attachments); err != nil {
			return Deps{}, nil, err
		}
	}
	return deps, attachments, nil
}

// wireCapacity hands the capacity publisher to the provisioner and keeps it
// current: new segments and classes get their objects at once, not at the
// next poll (with CSIDriver.storageCapacity, a segment without an object
// has no room as far as kube-scheduler is concerned).
func wireCapacity(cfg ControllerConfig, pub *capacity.Publisher, deps *Deps, index *topology.Index, classes cache.SharedIndexInformer) error {
	pub.SetMetrics(deps.Metrics.Capacity())
	if cfg.Metrics != nil {
		cfg.Metrics.CustomMustRegister(capacity.NewCollector(pub))
	}
	deps.Capacity = pub
	index.OnNewSegment(func(s topology.Segment) { pub.TouchSegment(s.String()) })
	if _, err := classes.AddEventHandler(pub.ClassEventHandler()); err != nil {
		return fmt.Errorf("watching storage classes: %w", err)
	}
	return nil
}

// scopeToNode, with node deployment, limits the library to the node's
// claims and volumes and returns the claimer of immediate-binding claims
// (nil without ImmediateBinding, or without node deployment).
func scopeToNode(cfg ControllerConfig, clients Clients, p *Provisioner, inf controllerInformers, libClaims, libVolumes *replayInformer) (*nodedeploy.Claimer, error) {
	nd := cfg.Provisioner.Node
	if nd == nil {
		return nil, nil
	}
	classes := inf.factory.Storage().V1().StorageClasses().Lister()
	libClaims.scope, libVolumes.scope = nd.OwnsClaim, nd.OwnsVolume
	if nd.LabelSelection {
		libClaims.keep = nd.KeepAfterWrite(cfg.Provisioner.DriverName, classes)
	}
	if !nd.ImmediateBinding {
		return nil, nil
	}
	return nodedeploy.NewClaimer(nodedeploy.ClaimerConfig{Node: nd, DriverName: cfg.Provisioner.DriverName, Claims: inf.claims,
		Classes: classes, Nodes: informercache.NewNodeLister(inf.nodes.GetIndexer()), Client: clients.Work.CoreV1(), Check: p.nodeMayTake(cfg.Capacity != nil)})
}

// libraryOptions are the provisioning library's options.
func libraryOptions(cfg ControllerConfig, inf controllerInformers, libClaims, libVolumes *replayInformer,
	retries *SlowRetries) []func(*controller.ProvisionController) error {
	opts := []func(*controller.ProvisionController) error{
		controller.ClaimsInformer(libClaims),
		controller.VolumesInformer(libVolumes),
		controller.ClassesInformer(inf.classes),
		controller.NodesLister(informercache.NewNodeLister(inf.nodes.GetIndexer())),
		controller.Threadiness(cfg.WorkerThreads),
		controller.ResyncPeriod(cfg.ResyncPeriod),
		controller.RateLimiter(retries),
		controller.CreateProvisionedPVLimiter(workqueue.DefaultControllerRateLimiter()),
		controller.AddFinalizer(true),
		controller.FailedProvisionThreshold(0),
		controller.FailedDeleteThreshold(0),
		// Leader election is ours (runLeaderElected): the library's exits
		// the process when its context ends, so SIGTERM could not be clean.
		controller.LeaderElection(false),
	}
	if cfg.Metrics != nil {
		opts = append(opts, controller.MetricsInstance(newLibraryMetrics(cfg.Metrics)))
	}
	return opts
}

// RetryNow queues every claim without a volume and every PV that may need
// deleting for an attempt now, rather than when their backoff ends, and
// refreshes every capacity object: call it when the driver is back after
// an outage (driverconn.MonitorConfig.OnReconnect). Safe to call at any time.
func (c *Controller) RetryNow(ctx context.Context) {
	claims, volumes := c.libClaims.replay(), c.libVolumes.replay()
	if c.capacity != nil {
		c.capacity.TouchAll()
	}
	klog.FromContext(ctx).V(2).Info("Retrying pending claims and volumes now", "claims", claims, "volumes", volumes)
}

// Provisioner returns the Provisioner the controller runs.
func (c *Controller) Provisioner() *Provisioner { return c.provisioner }

// Run starts the informers, waits for their caches and runs the leader's
// work (leaderWork: the library's controller and the parts beside it,
// behind leader election when configured) until ctx is done,
// and then, while leading, up to DrainTimeout more to let the CreateVolume
// calls in flight finish (drain). Informers run on standby replicas too, so
// a new leader starts warm.
func (c *Controller) Run(ctx context.Context) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
			c.drain(runCtx)
			stop()
		case <-runCtx.Done():
		}
	}()
	return c.run(runCtx)
}

// run is Run until its context ends.
func (c *Controller) run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if c.nodeFactory != nil {
		c.nodeFactory.Start(ctx.Done())
		defer c.nodeFactory.Shutdown()
	}
	if c.nodes != nil {
		go c.nodes.RunWithContext(ctx)
	}
	for _, f := range []informers.SharedInformerFactory{c.factory, c.nodeFactory} {
		if f == nil {
			continue
		}
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer cache for %v did not sync", typ)
			}
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.indexSynced...) {
		return fmt.Errorf("segment index did not sync")
	}
	defer c.sources.broadcast.Shutdown()
	c.sources.start(ctx)
	if c.capacity != nil {
		c.capacityFactory.Start(ctx.Done())
		defer c.capacityFactory.Shutdown()
		for typ, ok := range c.capacityFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer cache for %v did not sync", typ)
			}
		}
	}
	work := func(ctx context.Context) {
		c.leading.Store(true)
		defer c.leading.Store(false)
		runRunners(ctx, c.leaderWork())
	}
	if !c.cfg.LeaderElection {
		work(ctx)
		return nil
	}
	return runLeaderElected(ctx, c.cfg, c.clients.LeaderElection, work)
}

// Leading reports whether this replica is provisioning: it holds the
// leader-election Lease (or runs without leader election) and its caches
// have synced. Serve it as /readyz.
func (c *Controller) Leading() bool { return c.leading.Load() }

// selectionHandler feeds claim events to the selection clock.
func selectionHandler(clock *SelectionClock) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
				clock.Observe(c)
			}
		},
		UpdateFunc: func(_, obj any) {
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
				clock.Observe(c)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
				clock.Forget(c.UID)
			}
		},
	}
}
