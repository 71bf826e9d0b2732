package provisioner

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testdriver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testobjects"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/informercache"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

const (
	testDriver = driver.DefaultName
	zoneKey    = driver.TopologyPrefix + "zone"
	gi         = int64(1) << 30
)

// recordingCSI records the requests it forwards to the mock driver.
type recordingCSI struct {
	ControllerClient
	mu      sync.Mutex
	creates []*csi.CreateVolumeRequest
	deletes []*csi.DeleteVolumeRequest
}

func (r *recordingCSI) CreateVolume(ctx context.Context, in *csi.CreateVolumeRequest, opts ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	r.mu.Lock()
	r.creates = append(r.creates, in)
	r.mu.Unlock()
	return r.ControllerClient.CreateVolume(ctx, in, opts...)
}

func (r *recordingCSI) DeleteVolume(ctx context.Context, in *csi.DeleteVolumeRequest, opts ...grpc.CallOption) (*csi.DeleteVolumeResponse, error) {
	r.mu.Lock()
	r.deletes = append(r.deletes, in)
	r.mu.Unlock()
	return r.ControllerClient.DeleteVolume(ctx, in, opts...)
}

func (r *recordingCSI) lastCreate(t *testing.T) *csi.CreateVolumeRequest {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.creates) == 0 {
		t.Fatal("no CreateVolume call")
	}
	return r.creates[len(r.creates)-1]
}

// startMock serves a mock driver controller in-process on a unix socket.
func startMock(t *testing.T, ctx context.Context, mutate func(*driver.Config)) (*driver.Driver, csi.ControllerClient) {
	t.Helper()
	return testdriver.StartController(t, ctx, "prov", mutate)
}

// env is a Provisioner over a fake clientset with real informers and the
// in-process mock driver.
type env struct {
	ctx    context.Context
	client *fake.Clientset
	mock   *driver.Driver
	csi    *recordingCSI
	p      *Provisioner
	// with envOptions.sources:
	snap       *snapfake.Clientset
	events     *record.FakeRecorder
	protection *sourceprotection.Controller
}

type envOptions struct {
	cfg     Config
	mock    func(*driver.Config)
	objs    []runtime.Object
	nodes   map[string]string // node name -> zone (with CSINode entries)
	direct  ControllerClient  // replaces the mock (for failure injection at the client)
	clock   clock.PassiveClock
	metrics *Metrics
	// sources wires data sources and VolumeAttributesClasses (listers,
	// protection, an Event recorder); snapObjs seed the snapshot API.
	sources  bool
	snapObjs []runtime.Object
	// apisMissing, with sources, has the snapshot and
	// VolumeAttributesClass APIs never served (optional APIs never ready).
	apisMissing bool
	// records switches the durable in-flight record on (Deps.ClaimPatcher).
	records bool
	// driverStatus is Deps.DriverStatus.
	driverStatus func() (bool, string)
	// driver is the provisioner's driver name (default testDriver; the
	// mock answers whatever name it is called by).
	driver string
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	mock, client := startMock(t, ctx, o.mock)
	objs := append([]runtime.Object(nil), o.objs...)
	for name, zone := range o.nodes {
		objs = append(objs, makeNode(name, zone), makeCSINode(name, zoneKey))
	}
	cs := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(cs, 0)
	driverName := testDriver
	if o.driver != "" {
		driverName = o.driver
	}
	index := topology.NewIndex(driverName)
	csiNodes := factory.Storage().V1().CSINodes()
	classes := factory.Storage().V1().StorageClasses().Lister()
	indexSynced, err := informercache.FeedIndex(index, factory.Core().V1().Nodes().Informer(), csiNodes.Informer())
	if err != nil {
		t.Fatal(err)
	}
	claimVolumes, err := NewClaimVolumeIndex(factory.Core().V1().PersistentVolumes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	var srcs Sources
	var snapCS *snapfake.Clientset
	var events *record.FakeRecorder
	var snapInformers *sourceprotection.SnapshotInformers
	if o.sources {
		var si sourceprotection.SnapshotInformers
		srcs, snapCS, si, events = sourcesFor(t, cs, factory, o.snapObjs)
		snapInformers = &si
		if o.apisMissing {
			srcs.SnapshotAPI, srcs.AttributesClassAPI = neverServed(), neverServed()
		}
	}
	ictx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	factory.Start(ictx.Done())
	if snapInformers != nil {
		snapInformers.Run(ictx)
		if !cache.WaitForCacheSync(ictx.Done(), snapInformers.HasSynced) {
			t.Fatal("snapshot informers did not sync")
		}
	}
	for typ, ok := range factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	if !cache.WaitForCacheSync(ictx.Done(), indexSynced...) {
		t.Fatal("index did not sync")
	}
	rec := &recordingCSI{ControllerClient: client}
	if o.direct != nil {
		rec.ControllerClient = o.direct
	}
	cfg := o.cfg
	cfg.DriverName = driverName
	deps := Deps{CSI: rec, Secrets: cs.CoreV1(), CSINodes: csiNodes.Lister(), Classes: classes, Index: index, Decisions: NewDecisionLog(),
		Clock: o.clock, Metrics: o.metrics, Sources: srcs, DriverStatus: o.driverStatus, ClaimVolumes: claimVolumes}
	if o.records {
		deps.ClaimPatcher = cs.CoreV1()
	}
	p, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, client: cs, mock: mock, csi: rec, p: p, snap: snapCS, events: events, protection: srcs.Protection}
}

func (e *env) provision(t *testing.T, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass, node *v1.Node) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	t.Helper()
	return e.p.Provision(e.ctx, controller.ProvisionOptions{
		StorageClass: class,
		PVName:       "pvc-" + string(claim.UID),
		PVC:          claim,
		SelectedNode: node,
	})
}

// makeNode is the Node name in zone (no zone label where zone is empty).
func makeNode(name, zone string) *v1.Node { return testobjects.Node(name, zoneKey, zone) }

// makeCSINode is node name's CSINode with testDriver's entry of these keys.
func makeCSINode(name string, keys ...string) *storagev1.CSINode {
	return testobjects.CSINode(name, testDriver, keys...)
}

// classBuilder builds the classes of the tests.
type classBuilder = testobjects.Class

// makeClass is the class name of testDriver; it waits for the first consumer.
func makeClass(name string) classBuilder { return testobjects.NewClass(name, testDriver) }

type claimBuilder struct{ *v1.PersistentVolumeClaim }

func makePVC(name, class string) claimBuilder {
	return claimBuilder{&v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: resource.MustParse("1Gi"),
			}},
		},
	}}
}

func (c claimBuilder) withSelectedNode(node string) claimBuilder {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annSelectedNode] = node
	return c
}

func (c claimBuilder) withSize(q string) claimBuilder {
	c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(q)
	return c
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }

// neverServed is an optional API that is never run, so never ready.
func neverServed() *optionalapi.API {
	return optionalapi.New(optionalapi.Config{What: "never served", Probe: func(context.Context) error { return errors.New("not served") }})
}
