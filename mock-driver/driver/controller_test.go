package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"
)

func TestCreateVolumePlacement(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(*Config)
		existing []createReq // created first
		req      createReq
		want     map[string]string
		wantCode codes.Code
	}{
		{
			name: "first preferred with room",
			req:  makeCreate("v", gi).requisite("z1", "z2").preferred("z2", "z1"),
			want: zone("z2"),
		},
		{
			name:     "preferred full: the next preferred",
			existing: []createReq{makeCreate("a", 2*gi).preferred("z2")},
			req:      makeCreate("v", gi).requisite("z1", "z2").preferred("z2", "z1"),
			want:     zone("z1"),
		},
		{
			name:     "preferred full: requisite fallback",
			existing: []createReq{makeCreate("a", 2*gi).preferred("z2")},
			req:      makeCreate("v", gi).requisite("z3", "z2", "z1").preferred("z2"),
			want:     zone("z1"),
		},
		{
			name: "requisite only: first with room, in requisite order",
			req:  makeCreate("v", gi).requisite("z3", "z2", "z1"),
			want: zone("z2"),
		},
		{
			name:     "preferred only and full: any segment, most free first",
			existing: []createReq{makeCreate("a", 2*gi).preferred("z1"), makeCreate("b", gi).preferred("z2")},
			req:      makeCreate("v", gi).preferred("z1"),
			want:     zone("z2"),
		},
		{
			name:     "no requirements: most free",
			existing: []createReq{makeCreate("a", gi).preferred("z1")},
			req:      makeCreate("v", gi),
			want:     zone("z2"),
		},
		{
			name: "no requirements, a tie: segment order",
			req:  makeCreate("v", gi),
			want: zone("z1"),
		},
		{
			name:     "only full segments allowed",
			req:      makeCreate("v", gi).requisite("z3").preferred("z3"),
			wantCode: codes.ResourceExhausted,
		},
		{
			name:     "requisite outside the segment table",
			req:      makeCreate("v", gi).requisite("z9"),
			wantCode: codes.ResourceExhausted,
		},
		{
			name:     "larger than the room of the allowed segments",
			req:      makeCreate("v", 3*gi).requisite("z1", "z2"),
			wantCode: codes.ResourceExhausted,
		},
		{
			name:     "larger than the largest volume",
			req:      makeCreate("v", 2*DefaultMaxVolumeBytes),
			wantCode: codes.OutOfRange,
		},
		{
			name: "requirements with a key the segments lack",
			req: makeCreate("v", gi).withTopology(
				map[string]string{TopologyPrefix + "zone": "z2", TopologyPrefix + "rack": "r1"}),
			want: zone("z2"),
		},
		{
			name:   "without a segment table: the node's segment, unlimited",
			mutate: func(c *Config) { c.Segments = nil; c.NodeTopology = map[string]string{"zone": "z7"} },
			req:    makeCreate("v", 100*gi).requisite("z7"),
			want:   zone("z7"),
		},
		{
			name:   "topology disabled: requirements ignored, no accessible topology",
			mutate: func(c *Config) { c.DisableTopology = true },
			req:    makeCreate("v", gi).requisite("z3"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, tc.mutate)
			for _, r := range tc.existing {
				if _, err := d.CreateVolume(ctx, r.CreateVolumeRequest); err != nil {
					t.Fatalf("creating %s: %v", r.Name, err)
				}
			}
			resp, err := d.CreateVolume(ctx, tc.req.CreateVolumeRequest)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err != nil {
				return
			}
			var want []*csi.Topology
			if tc.want != nil {
				want = []*csi.Topology{{Segments: tc.want}}
			}
			if diff := cmp.Diff(want, resp.GetVolume().GetAccessibleTopology(), protocmp.Transform()); diff != "" {
				t.Errorf("accessible topology (-want +got):\n%s", diff)
			}
			if got, want := resp.GetVolume().GetVolumeContext()[ContextSegment], segmentKey(tc.want); tc.want != nil && got != want {
				t.Errorf("volume context segment %q, want %q", got, want)
			}
		})
	}
}

// withTopology sets one topology as requisite and preferred.
func (r createReq) withTopology(seg map[string]string) createReq {
	r.AccessibilityRequirements = &csi.TopologyRequirement{
		Requisite: []*csi.Topology{{Segments: seg}}, Preferred: []*csi.Topology{{Segments: seg}},
	}
	return r
}

func TestCreateVolumeIdempotency(t *testing.T) {
	first := makeCreate("same", gi).requisite("z1", "z2").preferred("z2").params(map[string]string{"type": "fast"})
	tests := []struct {
		name     string
		again    createReq
		wantCode codes.Code
	}{
		{name: "same request", again: first},
		{name: "other preferred order within requisite", again: makeCreate("same", gi).requisite("z2", "z1").preferred("z1").params(map[string]string{"type": "fast"})},
		{name: "smaller required size still fits", again: makeCreate("same", gi/2).requisite("z2").params(map[string]string{"type": "fast"})},
		{name: "larger size", again: makeCreate("same", 2*gi).params(map[string]string{"type": "fast"}), wantCode: codes.AlreadyExists},
		{name: "other parameters", again: makeCreate("same", gi).params(map[string]string{"type": "slow"}), wantCode: codes.AlreadyExists},
		{name: "no parameters", again: makeCreate("same", gi), wantCode: codes.AlreadyExists},
		{name: "requisite excludes its segment", again: makeCreate("same", gi).requisite("z1").params(map[string]string{"type": "fast"}), wantCode: codes.AlreadyExists},
		{
			name: "block instead of mount",
			again: func() createReq {
				r := makeCreate("same", gi).params(map[string]string{"type": "fast"})
				r.VolumeCapabilities = []*csi.VolumeCapability{capability(true, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
				return r
			}(),
			wantCode: codes.AlreadyExists,
		},
		{
			name: "other access mode",
			again: func() createReq {
				r := makeCreate("same", gi).params(map[string]string{"type": "fast"})
				r.VolumeCapabilities = []*csi.VolumeCapability{capability(false, csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
				return r
			}(),
			wantCode: codes.AlreadyExists,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, nil)
			created, err := d.CreateVolume(ctx, first.CreateVolumeRequest)
			if err != nil {
				t.Fatal(err)
			}
			again, err := d.CreateVolume(ctx, tc.again.CreateVolumeRequest)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("re-create: code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err == nil {
				if diff := cmp.Diff(created, again, protocmp.Transform()); diff != "" {
					t.Errorf("re-create answered another volume (-first +again):\n%s", diff)
				}
			}
			if n := len(d.Volumes()); n != 1 {
				t.Errorf("driver has %d volumes, want 1", n)
			}
		})
	}
}

func TestCreateVolumeArguments(t *testing.T) {
	tests := []struct {
		name     string
		req      *csi.CreateVolumeRequest
		wantSize int64
		wantCode codes.Code
	}{
		{name: "no name", req: &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{mountCap()}}, wantCode: codes.InvalidArgument},
		{name: "no capabilities", req: &csi.CreateVolumeRequest{Name: "v"}, wantCode: codes.InvalidArgument},
		{
			name:     "capability without access type",
			req:      &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{{AccessMode: mountCap().AccessMode}}},
			wantCode: codes.InvalidArgument,
		},
		{
			name:     "capability without access mode",
			req:      &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{{AccessType: mountCap().AccessType}}},
			wantCode: codes.InvalidArgument,
		},
		{name: "no size: 1 GiB", req: makeCreate("v", 0).CreateVolumeRequest, wantSize: gi},
		{name: "rounded up to a MiB", req: makeCreate("v", 1<<20+1).CreateVolumeRequest, wantSize: 2 << 20},
		{name: "rounding stops at the limit", req: withLimit(makeCreate("v", 1000), 1500), wantSize: 1500},
		{name: "only a limit below 1 GiB", req: withLimit(makeCreate("v", 0), 5<<20), wantSize: 5 << 20},
		{name: "required above limit", req: withLimit(makeCreate("v", 2<<20), 1<<20), wantCode: codes.InvalidArgument},
		{name: "negative size", req: makeCreate("v", -1).CreateVolumeRequest, wantCode: codes.InvalidArgument},
		{name: "absurd size", req: makeCreate("v", 1<<62).CreateVolumeRequest, wantCode: codes.OutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, nil)
			resp, err := d.CreateVolume(ctx, tc.req)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if got := resp.GetVolume().GetCapacityBytes(); got != tc.wantSize {
				t.Errorf("size %d, want %d", got, tc.wantSize)
			}
		})
	}
}

func withLimit(r createReq, limit int64) *csi.CreateVolumeRequest {
	r.CapacityRange.LimitBytes = limit
	return r.CreateVolumeRequest
}

func TestDeleteVolume(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	resp, err := d.CreateVolume(ctx, makeCreate("v", gi).CreateVolumeRequest)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		id       string
		wantCode codes.Code
	}{
		{name: "existing", id: resp.GetVolume().GetVolumeId()},
		{name: "again", id: resp.GetVolume().GetVolumeId()},
		{name: "never existed", id: "vol-999999"},
		{name: "no ID", wantCode: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: tc.id})
			if status.Code(err) != tc.wantCode {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
		})
	}
	if n := len(d.Volumes()); n != 0 {
		t.Errorf("%d volumes left", n)
	}
	// The deleted volume's bytes are free again.
	if _, err := d.CreateVolume(ctx, makeCreate("w", 2*gi).requisite("z1").CreateVolumeRequest); err != nil {
		t.Errorf("creating in the freed segment: %v", err)
	}
}

func TestValidateVolumeCapabilities(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	resp, err := d.CreateVolume(ctx, makeCreate("v", gi).CreateVolumeRequest)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	tests := []struct {
		name          string
		id            string
		caps          []*csi.VolumeCapability
		wantConfirmed bool
		wantCode      codes.Code
	}{
		{name: "same access type", id: id, caps: []*csi.VolumeCapability{mountCap()}, wantConfirmed: true},
		{name: "block of a mount volume", id: id, caps: []*csi.VolumeCapability{capability(true, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}},
		{name: "unknown volume", id: "vol-999999", caps: []*csi.VolumeCapability{mountCap()}, wantCode: codes.NotFound},
		{name: "no capabilities", id: id, wantCode: codes.InvalidArgument},
		{name: "no ID", caps: []*csi.VolumeCapability{mountCap()}, wantCode: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: tc.id, VolumeCapabilities: tc.caps})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if got := resp.GetConfirmed() != nil; err == nil && got != tc.wantConfirmed {
				t.Errorf("confirmed %v, want %v (message %q)", got, tc.wantConfirmed, resp.GetMessage())
			}
		})
	}
}
