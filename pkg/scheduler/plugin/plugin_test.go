package plugin

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

const driver = "mock.csi.example.com"

// cycleState keeps what the plugin writes; other methods are not used.
type cycleState struct {
	fwk.CycleState
	data map[fwk.StateKey]fwk.StateData
}

func (c *cycleState) Read(k fwk.StateKey) (fwk.StateData, error) {
	if d, ok := c.data[k]; ok {
		return d, nil
	}
	return nil, fwk.ErrNotFound
}

func (c *cycleState) Write(k fwk.StateKey, d fwk.StateData) { c.data[k] = d }

type nodeInfo struct {
	fwk.NodeInfo
	node *v1.Node
}

func (n nodeInfo) Node() *v1.Node { return n.node }

func TestDecodeArgs(t *testing.T) {
	defaults := scheduler.DefaultScoreWeights()
	tests := []struct {
		name    string
		obj     runtime.Object
		want    Args
		wantErr string
	}{
		{name: "driver and TTL", obj: raw(`{"driverName":"d","reservationTTL":"2m"}`),
			want: Args{DriverName: "d", ReservationTTL: metav1.Duration{Duration: 2 * time.Minute}, ScoreWeights: defaults}},
		{name: "capacity off", obj: raw(`{"driverName":"d","capacity":false}`),
			want: Args{DriverName: "d", Capacity: ptr.To(false), ScoreWeights: defaults}},
		{name: "both weights", obj: raw(`{"driverName":"d","scoreWeights":{"freeCapacity":2,"volumeHeadroom":3}}`),
			want: Args{DriverName: "d", ScoreWeights: scheduler.ScoreWeights{FreeCapacity: 2, VolumeHeadroom: 3}}},
		{name: "a weight left out keeps its default", obj: raw(`{"driverName":"d","scoreWeights":{"volumeHeadroom":1}}`),
			want: Args{DriverName: "d", ScoreWeights: scheduler.ScoreWeights{FreeCapacity: 1, VolumeHeadroom: 1}}},
		{name: "headroom only", obj: raw(`{"driverName":"d","scoreWeights":{"freeCapacity":0,"volumeHeadroom":1}}`),
			want: Args{DriverName: "d", ScoreWeights: scheduler.ScoreWeights{VolumeHeadroom: 1}}},
		{name: "heartbeat off, namespace", obj: raw(`{"driverName":"d","driverHeartbeat":false,"heartbeatNamespace":"csi"}`),
			want: Args{DriverName: "d", DriverHeartbeat: ptr.To(false), HeartbeatNamespace: "csi", ScoreWeights: defaults}},
		{name: "no args", obj: nil, wantErr: "driverName is required"},
		{name: "malformed", obj: raw(`{`), wantErr: "CSITopology args"},
		{name: "no driver", obj: raw(`{}`), wantErr: "driverName is required"},
		{name: "unknown field", obj: raw(`{"driverName":"d","reservationTtl":"2m"}`), wantErr: "unknown field"},
		{name: "unknown weight", obj: raw(`{"driverName":"d","scoreWeights":{"freeSpace":1}}`), wantErr: "unknown field"},
		{name: "duplicated field", obj: raw(`{"driverName":"d","driverName":"e"}`), wantErr: "duplicate"},
		{name: "negative weight", obj: raw(`{"driverName":"d","scoreWeights":{"volumeHeadroom":-1}}`), wantErr: "must not be negative"},
		{name: "both weights zero", obj: raw(`{"driverName":"d","scoreWeights":{"freeCapacity":0}}`), wantErr: "both 0"},
		{name: "another type", obj: &v1.Pod{}, wantErr: "unexpected type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeArgs(tc.obj)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("DecodeArgs = %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeArgs (-want +got):\n%s", diff)
			}
		})
	}
}

func raw(s string) runtime.Object {
	return &runtime.Unknown{Raw: []byte(s), ContentType: runtime.ContentTypeJSON}
}

// The sample configurations in deploy/ show scoreWeights, and their
// arguments decode as kube-scheduler hands them to New.
func TestDeployedArgs(t *testing.T) {
	tests := []struct {
		name string
		path string
	}{
		{name: "plugin component", path: "../../../deploy/kubernetes/components/scheduler-plugin/config.yaml"},
		{name: "mock overlay", path: "../../../deploy/kubernetes/overlays/mock/scheduler-config-patch.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, cfg := shippedConfig(t, tc.path)
			if !strings.Contains(text, "scoreWeights:") {
				t.Errorf("%s does not show scoreWeights", tc.path)
			}
			found := false
			for _, p := range cfg.Profiles {
				for _, pc := range p.PluginConfig {
					if pc.Name != Name {
						continue
					}
					found = true
					if _, err := DecodeArgs(pc.Args); err != nil {
						t.Error(err)
					}
				}
			}
			if !found {
				t.Errorf("no pluginConfig for %s", Name)
			}
		})
	}
}

// shippedConfig reads the KubeSchedulerConfiguration of a ConfigMap file
// in deploy/, as text and decoded (with kube-scheduler's defaults).
func shippedConfig(t *testing.T, path string) (string, *schedconfig.KubeSchedulerConfiguration) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cm v1.ConfigMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	text := cm.Data["config.yaml"]
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(text), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded a %T", obj)
	}
	return text, cfg
}

func TestExtensionPoints(t *testing.T) {
	store := func(objs ...runtime.Object) cache.Indexer { return storeOf(t, objs...) }
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	cls := "fast"
	claims := store(&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "u1"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, Resources: v1.VolumeResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}})
	core, err := scheduler.New(scheduler.Config{Driver: driver}, scheduler.Listers{
		Claims:  corelisters.NewPersistentVolumeClaimLister(claims),
		Volumes: corelisters.NewPersistentVolumeLister(store()),
		Classes: storagelisters.NewStorageClassLister(store(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: cls}, Provisioner: driver, VolumeBindingMode: &mode})),
		CSINodes: storagelisters.NewCSINodeLister(store(&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: storagev1.CSINodeSpec{
			Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: "good"}}}})),
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{core: core}
	_, ctx := ktesting.NewTestContext(t)
	withClaim := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "d",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}

	cs := &cycleState{data: map[fwk.StateKey]fwk.StateData{}}
	if _, st := p.PreFilter(ctx, cs, &v1.Pod{}, nil); st.Code() != fwk.Skip {
		t.Errorf("pod without claims: PreFilter %v, want Skip", st)
	}
	if st := p.PreScore(ctx, cs, &v1.Pod{}, nil); st.Code() != fwk.Skip {
		t.Errorf("pod without claims: PreScore %v, want Skip", st)
	}
	missing := withClaim.DeepCopy()
	missing.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "nope"
	if _, st := p.PreFilter(ctx, cs, missing, nil); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("missing claim: PreFilter %v", st)
	}
	if _, st := p.PreFilter(ctx, cs, withClaim, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter %v", st)
	}
	if st := p.Filter(ctx, cs, withClaim, nodeInfo{node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "good"}}}); !st.IsSuccess() {
		t.Errorf("node with the driver: %v", st)
	}
	st := p.Filter(ctx, cs, withClaim, nodeInfo{node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}})
	if st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("node without the driver: %v, want UnschedulableAndUnresolvable", st)
	}
	if s, st := p.Score(ctx, cs, withClaim, nodeInfo{node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "good"}}}); !st.IsSuccess() || s < 0 || s > fwk.MaxNodeScore {
		t.Errorf("Score = %d, %v", s, st)
	}
	p.Unreserve(ctx, cs, withClaim, "good")
	if p.Name() != Name || p.PreFilterExtensions() != nil || p.ScoreExtensions() != nil {
		t.Error("plugin identity")
	}
}

// otherState is cycle state of another type under the plugin's key.
type otherState struct{}

func (otherState) Clone() fwk.StateData { return otherState{} }

// State under the plugin's key that is not the plugin's, or holds no
// volumes, makes every extension point pass over the pod instead of
// panicking.
func TestForeignOrEmptyState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := &Plugin{}
	node := nodeInfo{node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}
	tests := []struct {
		name string
		data fwk.StateData
	}{
		{name: "another type", data: otherState{}},
		{name: "nil state", data: (*state)(nil)},
		{name: "no volumes", data: &state{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := &cycleState{data: map[fwk.StateKey]fwk.StateData{stateKey: tc.data}}
			if st := p.Filter(ctx, cs, &v1.Pod{}, node); !st.IsSuccess() {
				t.Errorf("Filter = %v, want success", st)
			}
			if st := p.PreScore(ctx, cs, &v1.Pod{}, nil); st.Code() != fwk.Skip {
				t.Errorf("PreScore = %v, want Skip", st)
			}
			if s, st := p.Score(ctx, cs, &v1.Pod{}, node); s != 0 || !st.IsSuccess() {
				t.Errorf("Score = %d, %v", s, st)
			}
			if st := p.Reserve(ctx, cs, &v1.Pod{}, "n"); !st.IsSuccess() {
				t.Errorf("Reserve = %v", st)
			}
			p.Unreserve(ctx, cs, &v1.Pod{}, "n")
		})
	}
}

// storeOf returns an indexer (with the namespace index) holding objs.
func storeOf(t testing.TB, objs ...runtime.Object) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}
