package driver

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

const gi = int64(1) << 30

func zone(z string) map[string]string { return map[string]string{TopologyPrefix + "zone": z} }

func topo(zones ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, z := range zones {
		out = append(out, &csi.Topology{Segments: zone(z)})
	}
	return out
}

func mountCap() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
}

func newTestDriver(t *testing.T, mutate func(*Config)) *Driver {
	t.Helper()
	cfg := Config{
		Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"),
		Mode:     ModeController,
		Segments: []SegmentConfig{
			{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 2 * gi},
			{Topology: map[string]string{"zone": "z2"}, CapacityBytes: 2 * gi},
			{Topology: map[string]string{"zone": "z3"}, CapacityBytes: 0},
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func create(ctx context.Context, d *Driver, name string, size int64, reqs *csi.TopologyRequirement) (*csi.Volume, error) {
	resp, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: mountCap(), AccessibilityRequirements: reqs,
	})
	return resp.GetVolume(), err
}

func TestCreateVolumePlacement(t *testing.T) {
	tests := []struct {
		name     string
		existing []*csi.TopologyRequirement // volumes of 1 GiB created first
		reqs     *csi.TopologyRequirement
		size     int64
		want     map[string]string
		wantCode codes.Code
	}{
		{name: "first preferred with room", reqs: &csi.TopologyRequirement{Requisite: topo("z1", "z2"), Preferred: topo("z2", "z1")}, size: gi, want: zone("z2")},
		{
			name:     "preferred full, falls back to requisite",
			existing: []*csi.TopologyRequirement{{Preferred: topo("z2")}, {Preferred: topo("z2")}},
			reqs:     &csi.TopologyRequirement{Requisite: topo("z1", "z2"), Preferred: topo("z2", "z1")},
			size:     gi, want: zone("z1"),
		},
		{name: "only full segments allowed", reqs: &csi.TopologyRequirement{Requisite: topo("z3"), Preferred: topo("z3")}, size: gi, wantCode: codes.ResourceExhausted},
		{name: "unknown segment", reqs: &csi.TopologyRequirement{Requisite: topo("z9")}, size: gi, wantCode: codes.ResourceExhausted},
		{name: "larger than any segment", reqs: &csi.TopologyRequirement{Requisite: topo("z1")}, size: 3 * gi, wantCode: codes.ResourceExhausted},
		{name: "larger than the largest volume", size: 1 << 50, wantCode: codes.OutOfRange},
		{name: "no requirements: most free", existing: []*csi.TopologyRequirement{{Preferred: topo("z1")}}, size: gi, want: zone("z2")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, nil)
			for i, r := range tc.existing {
				if _, err := create(ctx, d, "existing-"+string(rune('a'+i)), gi, r); err != nil {
					t.Fatal(err)
				}
			}
			vol, err := create(ctx, d, "v", tc.size, tc.reqs)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, vol.GetAccessibleTopology()[0].GetSegments()); diff != "" {
				t.Errorf("segment (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateVolumeIdempotent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	a, err := create(ctx, d, "same", gi, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := create(ctx, d, "same", gi, nil)
	if err != nil || b.GetVolumeId() != a.GetVolumeId() {
		t.Fatalf("re-create = %v, %v; want volume %s", b, err, a.GetVolumeId())
	}
	if _, err := create(ctx, d, "same", 2*gi, nil); status.Code(err) != codes.AlreadyExists {
		t.Errorf("incompatible re-create: code %v, want AlreadyExists", status.Code(err))
	}
	if _, err := create(ctx, d, "", gi, nil); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no name: code %v, want InvalidArgument", status.Code(err))
	}
}

func TestFaults(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, func(c *Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Segment: map[string]string{"zone": "z2"}}}
	})
	if _, err := create(ctx, d, "a", gi, &csi.TopologyRequirement{Requisite: topo("z1", "z2"), Preferred: topo("z2", "z1")}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("zone z2 preferred: code %v, want ResourceExhausted", status.Code(err))
	}
	if _, err := create(ctx, d, "b", gi, &csi.TopologyRequirement{Requisite: topo("z1", "z2"), Preferred: topo("z1", "z2")}); err != nil {
		t.Errorf("zone z1 preferred: %v", err)
	}
	if err := d.SetFaults([]faults.Rule{{Method: "DeleteVolume", Code: "UNAVAILABLE", Every: 2}}); err != nil {
		t.Fatal(err)
	}
	var got []codes.Code
	for i := 0; i < 4; i++ {
		_, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "nope"})
		got = append(got, status.Code(err))
	}
	if diff := cmp.Diff([]codes.Code{codes.OK, codes.Unavailable, codes.OK, codes.Unavailable}, got); diff != "" {
		t.Errorf("every-2 codes (-want +got):\n%s", diff)
	}
	inj, err := faults.NewInjector([]faults.Rule{{Method: "*", Code: "Aborted", Probability: 0.5, Count: 1}}, func() float64 { return 0.1 })
	if err != nil {
		t.Fatal(err)
	}
	if c1, c2 := status.Code(inj.Check(ctx, "Probe", nil)), status.Code(inj.Check(ctx, "Probe", nil)); c1 != codes.Aborted || c2 != codes.OK {
		t.Errorf("probability rule with count 1: %v then %v, want Aborted then OK", c1, c2)
	}
	if err := d.SetFaults([]faults.Rule{{Method: "CreateVolume", Code: "NoSuchCode"}}); err == nil {
		t.Error("unknown code accepted")
	}
}

func TestStatePersistsAcrossRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	d := newTestDriver(t, func(c *Config) { c.StateFile = stateFile })
	vol, err := create(ctx, d, "keep", gi, &csi.TopologyRequirement{Preferred: topo("z1")})
	if err != nil {
		t.Fatal(err)
	}
	restarted := newTestDriver(t, func(c *Config) { c.StateFile = stateFile })
	again, err := create(ctx, restarted, "keep", gi, nil)
	if err != nil || again.GetVolumeId() != vol.GetVolumeId() {
		t.Fatalf("after restart: %v, %v; want %s", again, err, vol.GetVolumeId())
	}
	if n := len(restarted.Volumes()); n != 1 {
		t.Errorf("restarted driver knows %d volumes, want 1", n)
	}
	if _, err := os.Stat(stateFile); err != nil {
		t.Error(err)
	}
}

func TestControllerPublishLimit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, func(c *Config) { c.MaxVolumesPerNode = 2; c.NodeLimits = map[string]int64{"small": 1} })
	publish := func(vol, node string) error {
		_, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeCapability: mountCap()[0]})
		return err
	}
	var ids []string
	for _, n := range []string{"a", "b", "c"} {
		v, err := create(ctx, d, n, gi/4, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, v.GetVolumeId())
	}
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if got := status.Code(publish(ids[i], "n1")); got != want {
			t.Errorf("publish %d: code %v, want %v", i, got, want)
		}
	}
	if got := status.Code(publish(ids[0], "n1")); got != codes.OK {
		t.Errorf("idempotent publish: code %v", got)
	}
	if got := status.Code(publish(ids[2], "small")); got != codes.OK {
		t.Errorf("publish to small: %v", got)
	}
	if got := status.Code(publish("missing", "n1")); got != codes.NotFound {
		t.Errorf("missing volume: code %v, want NotFound", got)
	}
}

func TestAdminAPI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	d := newTestDriver(t, func(c *Config) { c.AdminAddress = "127.0.0.1:0" })
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-d.Ready()
	do := func(method, path, body string) int {
		req, _ := http.NewRequestWithContext(ctx, method, d.AdminURL()+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"healthz", "GET", "/healthz", "", 200},
		{"malformed faults", "PUT", "/faults", "{not json", 400},
		{"unknown field", "PUT", "/faults", `[{"method":"CreateVolume","colour":"red"}]`, 400},
		{"valid faults", "PUT", "/faults", `[{"method":"CreateVolume","code":"RESOURCE_EXHAUSTED","segment":{"zone":"z1"}}]`, 200},
		{"clear faults", "DELETE", "/faults", "", 204},
		{"capacity", "PUT", "/segments", `{"topology":{"zone":"z3"},"capacityBytes":1073741824}`, 200},
		{"unknown segment", "PUT", "/segments", `{"topology":{"zone":"z9"},"capacityBytes":1}`, 400},
		{"volumes", "GET", "/volumes", "", 200},
		{"requests", "GET", "/requests?method=CreateVolume", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := do(tc.method, tc.path, tc.body); got != tc.want {
				t.Errorf("%s %s = %d, want %d", tc.method, tc.path, got, tc.want)
			}
		})
	}
	if _, err := create(ctx, d, "after-capacity", gi, &csi.TopologyRequirement{Requisite: topo("z3")}); err != nil {
		t.Errorf("z3 after raising its capacity: %v", err)
	}
}
