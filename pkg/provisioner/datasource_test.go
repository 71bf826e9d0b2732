package provisioner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/datasource"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// sourcesFor wires listers, protection and an Event recorder for data
// sources over the fake clientsets, before the factories start.
func sourcesFor(t *testing.T, cs *fake.Clientset, factory informers.SharedInformerFactory, snapObjs []runtime.Object) (Sources, *snapfake.Clientset, sourceprotection.SnapshotInformers, *record.FakeRecorder) {
	t.Helper()
	snapCS := snapfake.NewSimpleClientset(snapObjs...)
	snaps := sourceprotection.NewSnapshotInformers(noWatchList{snapCS}, 0)
	claims := factory.Core().V1().PersistentVolumeClaims()
	events := record.NewFakeRecorder(100)
	prot, err := sourceprotection.New(sourceprotection.Config{
		Claims: claims.Informer(), ClaimLister: claims.Lister(), ClaimClient: cs.CoreV1(),
		Snapshots: snaps.Snapshots, SnapshotLister: snaps.SnapshotLister(), SnapshotClient: snapCS.SnapshotV1(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return Sources{
		Claims:            claims.Lister(),
		Volumes:           factory.Core().V1().PersistentVolumes().Lister(),
		Snapshots:         snaps.SnapshotLister(),
		SnapshotContents:  snaps.ContentLister(),
		AttributesClasses: factory.Storage().V1().VolumeAttributesClasses().Lister(),
		Protection:        prot,
		Events:            events,
	}, snapCS, snaps, events
}

// noWatchList tells the informers that the snapshot fake clientset (built
// by an older client-gen) does not support watch-list semantics.
type noWatchList struct{ *snapfake.Clientset }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// copyingCSI is a driver that copies: its volumes report the content
// source they were made from (unless noEcho), in the first preferred
// segment.
type copyingCSI struct {
	csi.ControllerClient
	noEcho bool
}

func (c copyingCSI) CreateVolume(_ context.Context, in *csi.CreateVolumeRequest, _ ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	vol := &csi.Volume{VolumeId: "id-" + in.GetName(), CapacityBytes: in.GetCapacityRange().GetRequiredBytes()}
	if p := in.GetAccessibilityRequirements().GetPreferred(); len(p) > 0 {
		vol.AccessibleTopology = p[:1]
	}
	if !c.noEcho {
		vol.ContentSource = in.GetVolumeContentSource()
	}
	return &csi.CreateVolumeResponse{Volume: vol}, nil
}

func (copyingCSI) DeleteVolume(context.Context, *csi.DeleteVolumeRequest, ...grpc.CallOption) (*csi.DeleteVolumeResponse, error) {
	return &csi.DeleteVolumeResponse{}, nil
}

var sourceCaps = Config{SupportsTopology: true, SupportsClone: true, SupportsSnapshot: true, SupportsModify: true, PreventVolumeModeConversion: true}

// boundSource is a Bound claim "src" of size with its PV "pv-src" of
// driver, in zone (none: no node affinity).
func boundSource(size, driverName, zone string, mode *v1.PersistentVolumeMode) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	claim := makePVC("src", "zonal").withSize(size).PersistentVolumeClaim
	claim.Spec.VolumeName = "pv-src"
	claim.Status.Phase = v1.ClaimBound
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-src"},
		Spec: v1.PersistentVolumeSpec{
			VolumeMode: mode,
			ClaimRef:   &v1.ObjectReference{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: "handle-src"}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound},
	}
	if zone != "" {
		pv.Spec.NodeAffinity = zoneAffinity(zone)
	}
	return claim, pv
}

// nodeBoundAffinity is the affinity of a node-local volume: zone and
// kubernetes.io/hostname.
func nodeBoundAffinity(zone, node string) *v1.VolumeNodeAffinity {
	a := zoneAffinity(zone)
	term := &a.Required.NodeSelectorTerms[0]
	term.MatchExpressions = append(term.MatchExpressions,
		v1.NodeSelectorRequirement{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}})
	return a
}

func (c claimBuilder) cloneOf(name string) claimBuilder {
	c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: datasource.KindClaim, Name: name}
	c.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: datasource.KindClaim, Name: name}
	return c
}

func (c claimBuilder) restoreOf(name string) claimBuilder {
	g := snapv1.GroupName
	c.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: &g, Kind: datasource.KindSnapshot, Name: name}
	c.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: &g, Kind: datasource.KindSnapshot, Name: name}
	return c
}

func (c claimBuilder) withMode(m v1.PersistentVolumeMode) claimBuilder {
	c.Spec.VolumeMode = &m
	return c
}

func TestCloneRefusals(t *testing.T) {
	block := v1.PersistentVolumeBlock
	deleting := func(c *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
		now := metav1.Now()
		c.DeletionTimestamp = &now
		c.Finalizers = []string{"kubernetes.io/pvc-protection"}
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		size    string
		mode    *v1.PersistentVolumeMode
		mutate  func(*v1.PersistentVolumeClaim, *v1.PersistentVolume)
		noObjs  bool
		wantErr string
	}{
		{name: "driver cannot clone", cfg: Config{SupportsTopology: true}, size: "1Gi", wantErr: "lacks the CLONE_VOLUME controller capability"},
		{name: "source missing", size: "1Gi", noObjs: true, wantErr: `the source claim PersistentVolumeClaim "apps/src" does not exist`},
		{name: "clone smaller than its source", size: "2Gi", wantErr: `the claim requests 1Gi, less than the 2Gi of its source claim PersistentVolumeClaim "apps/src"`},
		{name: "source not bound", size: "1Gi", mutate: func(c *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
			c.Status.Phase, c.Spec.VolumeName = v1.ClaimPending, ""
		}, wantErr: "is not bound to a volume yet"},
		{name: "source being deleted", size: "1Gi", mutate: deleting, wantErr: "is being deleted"},
		{name: "source of another driver", size: "1Gi", mutate: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
			pv.Spec.CSI.Driver = "other.example.com"
		}, wantErr: `is a volume of another driver (CSI driver "other.example.com")`},
		{name: "source volume bound to another claim", size: "1Gi", mutate: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
			pv.Spec.ClaimRef.UID = "someone-else"
		}, wantErr: "is bound to another claim"},
		{name: "volume mode differs", size: "1Gi", mode: &block, wantErr: "asks for volume mode Filesystem but its source claim PersistentVolumeClaim \"apps/src\" is Block"},
		{name: "source volume released", size: "1Gi", mutate: func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
			pv.Status.Phase = v1.VolumeReleased
		}, wantErr: `is "Released", not Bound`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, pv := boundSource(tc.size, testDriver, "z1", tc.mode)
			if tc.mutate != nil {
				tc.mutate(src, pv)
			}
			var objs []runtime.Object
			if !tc.noObjs {
				objs = []runtime.Object{src, pv}
			}
			cfg := sourceCaps
			if tc.cfg.SupportsTopology {
				cfg = tc.cfg
			}
			e := newEnv(t, envOptions{cfg: cfg, nodes: threeZones, objs: objs, sources: true, direct: copyingCSI{}})
			clone := makePVC("clone", "zonal").cloneOf("src")
			_, state, err := e.provision(t, clone.PersistentVolumeClaim, makeClass("zonal").Immediate().StorageClass, nil)
			if !errors.Is(err, datasource.ErrRefused) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want ErrRefused saying %q", err, tc.wantErr)
			}
			if state != controller.ProvisioningFinished {
				t.Errorf("state = %v, want Finished (the library retries with its backoff)", state)
			}
			if n := len(e.csi.creates); n != 0 {
				t.Errorf("%d CreateVolume call(s) for a refused clone", n)
			}
		})
	}
}

func TestCloneProvision(t *testing.T) {
	src, pv := boundSource("1Gi", testDriver, "z1", nil)
	e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, objs: []runtime.Object{src, pv}, sources: true, direct: copyingCSI{}})
	clone := makePVC("clone", "other-class").cloneOf("src").withSize("2Gi")
	got, state, err := e.provision(t, clone.PersistentVolumeClaim, makeClass("other-class").Immediate().StorageClass, nil)
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision = %v, %v", state, err)
	}
	req := e.csi.lastCreate(t)
	wantSource := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "handle-src"}}}
	if diff := cmp.Diff(wantSource, req.GetVolumeContentSource(), protocmp.Transform()); diff != "" {
		t.Errorf("content source (-want +got):\n%s", diff)
	}
	// The source is in z1: of the three known zones only z1 is asked for.
	if diff := cmp.Diff(&csi.TopologyRequirement{Requisite: zoneTopo("z1"), Preferred: zoneTopo("z1")},
		req.GetAccessibilityRequirements(), protocmp.Transform()); diff != "" {
		t.Errorf("requirements (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(zoneAffinity("z1"), got.Spec.NodeAffinity); diff != "" {
		t.Errorf("PV node affinity (-want +got):\n%s", diff)
	}
	stored, err := e.client.CoreV1().PersistentVolumeClaims("apps").Get(e.ctx, "src", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasString(stored.Finalizers, sourceprotection.FinalizerCloneSource) {
		t.Errorf("source claim finalizers = %v, want %s", stored.Finalizers, sourceprotection.FinalizerCloneSource)
	}
}

func TestCloneSelectedNodeCannotReachSource(t *testing.T) {
	src, pv := boundSource("1Gi", testDriver, "z1", nil)
	e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, objs: []runtime.Object{src, pv}, sources: true, direct: copyingCSI{}})
	clone := makePVC("clone", "zonal").cloneOf("src").withSelectedNode("n2")
	_, state, err := e.provision(t, clone.PersistentVolumeClaim, makeClass("zonal").StorageClass, makeNode("n2", "z2"))
	if state != controller.ProvisioningReschedule {
		t.Fatalf("state = %v (%v), want Reschedule", state, err)
	}
	for _, want := range []string{`cannot reach the data source PersistentVolumeClaim "apps/src"`, zoneKey + " in (z1)", string(RescheduleSourceUnreachable)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := len(e.csi.creates); n != 0 {
		t.Errorf("%d CreateVolume call(s) for a node that cannot reach the source", n)
	}
	// On a node of the source's zone the clone is made there.
	clone = makePVC("clone", "zonal").cloneOf("src").withSelectedNode("n1")
	if _, state, err := e.provision(t, clone.PersistentVolumeClaim, makeClass("zonal").StorageClass, makeNode("n1", "z1")); err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision on n1 = %v, %v", state, err)
	}
	if diff := cmp.Diff(zoneTopo("z1"), e.csi.lastCreate(t).GetAccessibilityRequirements().GetRequisite(), protocmp.Transform()); diff != "" {
		t.Errorf("requisite (-want +got):\n%s", diff)
	}
}

func TestCloneWithoutEchoedContentSource(t *testing.T) {
	src, pv := boundSource("1Gi", testDriver, "", nil)
	e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, objs: []runtime.Object{src, pv}, sources: true, direct: copyingCSI{noEcho: true}})
	clone := makePVC("clone", "zonal").cloneOf("src")
	_, state, err := e.provision(t, clone.PersistentVolumeClaim, makeClass("zonal").Immediate().StorageClass, nil)
	if err == nil || !strings.Contains(err.Error(), "without reporting its content source") || state != controller.ProvisioningFinished {
		t.Fatalf("Provision = %v, %v; want a final error about the content source", state, err)
	}
	if len(e.csi.deletes) != 1 || e.csi.deletes[0].GetVolumeId() != "id-pvc-uid-clone" {
		t.Errorf("DeleteVolume calls = %v, want one for id-pvc-uid-clone", e.csi.deletes)
	}
}

func TestPopulatorAndCrossNamespace(t *testing.T) {
	e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, sources: true, direct: copyingCSI{}})
	group := "populator.example.com"
	pop := makePVC("pop", "zonal")
	pop.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: &group, Kind: "Sample", Name: "s1"}
	_, _, err := e.provision(t, pop.PersistentVolumeClaim, makeClass("zonal").Immediate().StorageClass, nil)
	var ignored *controller.IgnoredError
	if !errors.As(err, &ignored) {
		t.Fatalf("error = %v, want an IgnoredError (the populator makes the volume)", err)
	}
	select {
	case ev := <-e.events.Events:
		if !strings.HasPrefix(ev, "Normal Provisioning Assuming an external populator will provision the volume") || !strings.Contains(ev, `Sample "s1"`) {
			t.Errorf("event = %q", ev)
		}
	default:
		t.Error("no Event for the populator claim")
	}
	other := "elsewhere"
	cross := makePVC("cross", "zonal")
	cross.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: datasource.KindClaim, Name: "src", Namespace: &other}
	_, state, err := e.provision(t, cross.PersistentVolumeClaim, makeClass("zonal").Immediate().StorageClass, nil)
	if !errors.Is(err, ErrInvalidClaim) || !strings.Contains(err.Error(), `in another namespace (dataSourceRef PersistentVolumeClaim "src" in namespace "elsewhere") is not supported`) || state != controller.ProvisioningFinished {
		t.Fatalf("cross-namespace: %v, %v", state, err)
	}
	if len(e.csi.creates) != 0 {
		t.Errorf("%d CreateVolume call(s)", len(e.csi.creates))
	}
}

// snapshotPair is a ready VolumeSnapshot "snap" of claim "src" with its
// bound content, restore size 1Gi.
func snapshotPair(ready bool) (*snapv1.VolumeSnapshot, *snapv1.VolumeSnapshotContent) {
	contentName, srcClaim, handle, fs := "content-snap", "src", "snap-handle", v1.PersistentVolumeFilesystem
	size := resource.MustParse("1Gi")
	snap := &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "apps", UID: types.UID("uid-snap")},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &srcClaim}},
		Status:     &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &contentName, ReadyToUse: &ready, RestoreSize: &size},
	}
	volHandle := "handle-src"
	content := &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapv1.VolumeSnapshotContentSpec{
			Driver:            testDriver,
			VolumeSnapshotRef: v1.ObjectReference{Namespace: "apps", Name: "snap", UID: snap.UID},
			Source:            snapv1.VolumeSnapshotContentSource{VolumeHandle: &volHandle},
			SourceVolumeMode:  &fs,
		},
		Status: &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle},
	}
	return snap, content
}

func TestSnapshotRestore(t *testing.T) {
	block := v1.PersistentVolumeBlock
	for _, tc := range []struct {
		name   string
		ready  bool
		noSnap bool
		claim  claimBuilder
		mutate func(*snapv1.VolumeSnapshot, *snapv1.VolumeSnapshotContent)
		cfg    *Config
		// placement is the class's copy-placement annotation; srcAffinity
		// replaces the source PV's (zone z1).
		placement   string
		srcAffinity *v1.VolumeNodeAffinity
		wantErr     string
		wantZone    string
	}{
		{name: "snapshot of a zonal volume: restored anywhere, as upstream", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"), wantZone: "any"},
		{name: "snapshot of a node-bound volume: restored on its node", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"),
			srcAffinity: nodeBoundAffinity("z1", "n1"), wantZone: "z1"},
		{name: "class keeps copies near the source", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"), placement: "source", wantZone: "z1"},
		{name: "class places copies anywhere, node-bound source", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"),
			srcAffinity: nodeBoundAffinity("z1", "n1"), placement: "anywhere", wantZone: "any"},
		{name: "invalid copy placement", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"), placement: "zone",
			wantErr: `has annotation csi-topology-provisioner.io/copy-placement="zone"; use "auto", "source" or "anywhere"`},
		{name: "not ready", ready: false, claim: makePVC("r", "zonal").restoreOf("snap"), wantErr: `VolumeSnapshot "apps/snap" is not ready to use yet`},
		{name: "deleted snapshot", noSnap: true, claim: makePVC("r", "zonal").restoreOf("snap"), wantErr: `the VolumeSnapshot "apps/snap" does not exist`},
		{name: "smaller than the restore size", ready: true, claim: makePVC("r", "zonal").restoreOf("snap").withSize("512Mi"),
			wantErr: "the claim requests 512Mi, less than the restore size 1Gi"},
		{name: "snapshot of another driver", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"),
			mutate:  func(_ *snapv1.VolumeSnapshot, c *snapv1.VolumeSnapshotContent) { c.Spec.Driver = "other.example.com" },
			wantErr: `is a snapshot of CSI driver "other.example.com"`},
		{name: "volume mode conversion refused", ready: true, claim: makePVC("r", "zonal").restoreOf("snap").withMode(block),
			wantErr: "set annotation snapshot.storage.kubernetes.io/allow-volume-mode-change=true"},
		{name: "volume mode conversion allowed by the content", ready: true, claim: makePVC("r", "zonal").restoreOf("snap").withMode(block),
			mutate: func(_ *snapv1.VolumeSnapshot, c *snapv1.VolumeSnapshotContent) {
				c.Annotations = map[string]string{datasource.AnnAllowVolumeModeChange: "true"}
			}, wantZone: "any"},
		{name: "volume mode conversion with the check off", ready: true, claim: makePVC("r", "zonal").restoreOf("snap").withMode(block),
			cfg: &Config{SupportsTopology: true, SupportsSnapshot: true}, wantZone: "any"},
		{name: "driver cannot restore snapshots", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"),
			cfg: &Config{SupportsTopology: true}, wantErr: "lacks the CREATE_DELETE_SNAPSHOT controller capability"},
		{name: "source volume replaced since the snapshot: no topology constraint", ready: true, claim: makePVC("r", "zonal").restoreOf("snap"),
			placement: "source", mutate: func(_ *snapv1.VolumeSnapshot, c *snapv1.VolumeSnapshotContent) {
				h := "older-handle"
				c.Spec.Source.VolumeHandle = &h
			}, wantZone: "any"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcClaim, srcPV := boundSource("1Gi", testDriver, "z1", nil)
			if tc.srcAffinity != nil {
				srcPV.Spec.NodeAffinity = tc.srcAffinity
			}
			snap, content := snapshotPair(tc.ready)
			if tc.mutate != nil {
				tc.mutate(snap, content)
			}
			snapObjs := []runtime.Object{content}
			if !tc.noSnap {
				snapObjs = append(snapObjs, snap)
			}
			cfg := sourceCaps
			if tc.cfg != nil {
				cfg = *tc.cfg
			}
			e := newEnv(t, envOptions{cfg: cfg, nodes: threeZones, objs: []runtime.Object{srcClaim, srcPV}, snapObjs: snapObjs,
				sources: true, direct: copyingCSI{}})
			class := makeClass("zonal").Immediate()
			if tc.placement != "" {
				class.Annotations = map[string]string{topology.AnnCopyPlacement: tc.placement}
			}
			_, state, err := e.provision(t, tc.claim.PersistentVolumeClaim, class.StorageClass, nil)
			if tc.wantErr != "" {
				if !errors.Is(err, datasource.ErrRefused) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want ErrRefused saying %q", err, tc.wantErr)
				}
				if len(e.csi.creates) != 0 {
					t.Errorf("%d CreateVolume call(s) for a refused restore", len(e.csi.creates))
				}
				return
			}
			if err != nil || state != controller.ProvisioningFinished {
				t.Fatalf("Provision = %v, %v", state, err)
			}
			req := e.csi.lastCreate(t)
			if id := req.GetVolumeContentSource().GetSnapshot().GetSnapshotId(); id != "snap-handle" {
				t.Errorf("content source snapshot = %q, want snap-handle", id)
			}
			wantReq := zoneTopo("z1")
			if tc.wantZone == "any" {
				wantReq = nil // unconstrained, and Config.ImmediateTopology is off
			}
			if diff := cmp.Diff(wantReq, req.GetAccessibilityRequirements().GetRequisite(), protocmp.Transform()); diff != "" {
				t.Errorf("requisite (-want +got):\n%s", diff)
			}
			stored, err := e.snap.SnapshotV1().VolumeSnapshots("apps").Get(e.ctx, "snap", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !hasString(stored.Finalizers, sourceprotection.FinalizerSnapshotSource) {
				t.Errorf("snapshot finalizers = %v, want %s", stored.Finalizers, sourceprotection.FinalizerSnapshotSource)
			}
		})
	}
}

// A restore while the VolumeSnapshot API is not served (yet) is refused
// with a message that says so and that it is retried, after a bounded wait
// for the API; it is never handed back to the scheduler.
func TestSnapshotAPIMissing(t *testing.T) {
	e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, direct: copyingCSI{}, sources: true, apisMissing: true})
	claim := makePVC("r", "zonal").restoreOf("snap").withSelectedNode("n1").PersistentVolumeClaim
	_, state, err := e.provision(t, claim, makeClass("zonal").StorageClass, makeNode("n1", "z1"))
	if !errors.Is(err, datasource.ErrRefused) || state != controller.ProvisioningFinished ||
		!strings.Contains(err.Error(), "the VolumeSnapshot API (snapshot.storage.k8s.io/v1) is not served yet") ||
		!strings.Contains(err.Error(), "picked up without a restart") {
		t.Fatalf("Provision = %v, %v; want a refusal saying the API is not served yet", state, err)
	}
}

// A claim handed back because its node cannot reach the source, and
// selected for the same node again, says plainly that the scheduler chose
// that node again and why, instead of repeating the first message; another
// node starts the count again.
func TestSourceUnreachableAgainSaysSo(t *testing.T) {
	src, pv := boundSource("1Gi", testDriver, "z1", nil)
	e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, objs: []runtime.Object{src, pv}, sources: true, direct: copyingCSI{}})
	const again = "the scheduler chose n2 again"
	for i, tc := range []struct {
		node, zone, want string
	}{
		{node: "n2", zone: "z2"},
		{node: "n2", zone: "z2", want: again + " (2nd time in a row); the pod's scheduler does not know the source's reach"},
		{node: "n2", zone: "z2", want: again + " (3rd time in a row)"},
		{node: "n3", zone: "z3"},
	} {
		clone := makePVC("clone", "zonal").cloneOf("src").withSelectedNode(tc.node)
		_, state, err := e.provision(t, clone.PersistentVolumeClaim, makeClass("zonal").StorageClass, makeNode(tc.node, tc.zone))
		if state != controller.ProvisioningReschedule || err == nil {
			t.Fatalf("attempt %d on %s: state = %v (%v), want Reschedule", i+1, tc.node, state, err)
		}
		if !strings.Contains(err.Error(), string(RescheduleSourceUnreachable)) {
			t.Errorf("attempt %d: error %q does not name %s", i+1, err, RescheduleSourceUnreachable)
		}
		if tc.want == "" && strings.Contains(err.Error(), "again") {
			t.Errorf("attempt %d on %s: error %q says again, want the first message", i+1, tc.node, err)
		}
		if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("attempt %d on %s: error %q does not say %q", i+1, tc.node, err, tc.want)
		}
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 112: "112th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

// A delayed-binding copy whose node is in another zone than its source
// volume (z1): a restore of a zonal volume is made there, as upstream does;
// a restore of a node-bound volume and a clone go back to the scheduler,
// and the class's copy-placement annotation overrides both.
func TestCopyOnAnotherZone(t *testing.T) {
	for _, tc := range []struct {
		name        string
		clone       bool
		srcAffinity *v1.VolumeNodeAffinity
		placement   string
		wantBack    string // "": made on n2
	}{
		{name: "restore of a zonal volume"},
		{name: "restore of a node-bound volume", srcAffinity: nodeBoundAffinity("z1", "n1"),
			wantBack: "the snapshot was taken of a node-bound volume, so it is restored on that node"},
		{name: "restore, class keeps copies near the source", placement: "source",
			wantBack: "keeps copies near their source"},
		{name: "clone", clone: true, wantBack: "a clone is made where its source volume is reachable"},
		{name: "clone, class places copies anywhere", clone: true, placement: "anywhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcClaim, srcPV := boundSource("1Gi", testDriver, "z1", nil)
			if tc.srcAffinity != nil {
				srcPV.Spec.NodeAffinity = tc.srcAffinity
			}
			snap, content := snapshotPair(true)
			e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, objs: []runtime.Object{srcClaim, srcPV},
				snapObjs: []runtime.Object{snap, content}, sources: true, direct: copyingCSI{}})
			claim := makePVC("copy", "zonal").restoreOf("snap").withSelectedNode("n2")
			if tc.clone {
				claim = makePVC("copy", "zonal").cloneOf("src").withSelectedNode("n2")
			}
			class := makeClass("zonal")
			if tc.placement != "" {
				class.Annotations = map[string]string{topology.AnnCopyPlacement: tc.placement}
			}
			_, state, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, makeNode("n2", "z2"))
			if tc.wantBack != "" {
				if state != controller.ProvisioningReschedule || !strings.Contains(err.Error(), string(RescheduleSourceUnreachable)) ||
					!strings.Contains(err.Error(), tc.wantBack) {
					t.Fatalf("Provision = %v, %v; want a reschedule (%s) saying %q", state, err, RescheduleSourceUnreachable, tc.wantBack)
				}
				if n := len(e.csi.creates); n != 0 {
					t.Errorf("%d CreateVolume call(s) for a node that cannot reach the source", n)
				}
				return
			}
			if err != nil || state != controller.ProvisioningFinished {
				t.Fatalf("Provision = %v, %v; want the copy made on n2", state, err)
			}
			if got := e.csi.lastCreate(t).GetAccessibilityRequirements().GetPreferred()[0].GetSegments()[zoneKey]; got != "z2" {
				t.Errorf("preferred[0] zone = %q, want the node's z2", got)
			}
		})
	}
}

// hasString says whether list holds s.
func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
