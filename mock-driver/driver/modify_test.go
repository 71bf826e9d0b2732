package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

func (r createReq) mutable(p map[string]string) createReq {
	r.MutableParameters = p
	return r
}

func TestCreateVolumeMutableParameters(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(*Config)
		params   map[string]string
		wantCode codes.Code
	}{
		{name: "default keys", params: map[string]string{"iops": "3000", "throughput": "125"}},
		{name: "unknown key", params: map[string]string{"iops": "3000", "XXX_FakeKey": "x"}, wantCode: codes.InvalidArgument},
		{name: "own keys", mutate: func(c *Config) { c.MutableParameters = []string{"tier"} }, params: map[string]string{"tier": "gold"}},
		{name: "own keys replace the defaults", mutate: func(c *Config) { c.MutableParameters = []string{"tier"} }, params: map[string]string{"iops": "1"}, wantCode: codes.InvalidArgument},
		{name: "modify disabled", mutate: func(c *Config) { c.DisableModify = true }, params: map[string]string{"iops": "1"}, wantCode: codes.InvalidArgument},
		{name: "modify disabled, none given", mutate: func(c *Config) { c.DisableModify = true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, tc.mutate)
			_, err := d.CreateVolume(ctx, makeCreate("v", gi).mutable(tc.params).CreateVolumeRequest)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.params, d.Volumes()[0].MutableParameters); diff != "" {
				t.Errorf("stored mutable parameters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestControllerModifyVolume(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	vol := mustCreate(t, d, makeCreate("v", gi).mutable(map[string]string{"iops": "3000", "throughput": "125"}))
	plain := mustCreate(t, d, makeCreate("plain", gi))
	tests := []struct {
		name     string
		req      *csi.ControllerModifyVolumeRequest
		wantCode codes.Code
		want     map[string]string // the volume's mutable parameters afterwards
	}{
		{
			name: "merges: keys not given stay",
			req:  &csi.ControllerModifyVolumeRequest{VolumeId: vol.GetVolumeId(), MutableParameters: map[string]string{"iops": "6000"}},
			want: map[string]string{"iops": "6000", "throughput": "125"},
		},
		{
			name:     "unknown key changes nothing",
			req:      &csi.ControllerModifyVolumeRequest{VolumeId: vol.GetVolumeId(), MutableParameters: map[string]string{"iops": "1", "XXX_FakeKey": "x"}},
			wantCode: codes.InvalidArgument,
			want:     map[string]string{"iops": "6000", "throughput": "125"},
		},
		{
			name: "none given: no change",
			req:  &csi.ControllerModifyVolumeRequest{VolumeId: vol.GetVolumeId()},
			want: map[string]string{"iops": "6000", "throughput": "125"},
		},
		{name: "no volume ID", req: &csi.ControllerModifyVolumeRequest{MutableParameters: map[string]string{"iops": "1"}}, wantCode: codes.InvalidArgument},
		{name: "unknown volume", req: &csi.ControllerModifyVolumeRequest{VolumeId: "vol-424242", MutableParameters: map[string]string{"iops": "1"}}, wantCode: codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.ControllerModifyVolume(ctx, tc.req)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if tc.want == nil {
				return
			}
			if diff := cmp.Diff(tc.want, d.Volumes()[0].MutableParameters); diff != "" {
				t.Errorf("mutable parameters (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := d.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: plain.GetVolumeId(), MutableParameters: map[string]string{"throughput": "500"}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"throughput": "500"}, d.Volumes()[1].MutableParameters); diff != "" {
		t.Errorf("a volume created without mutable parameters, modified (-want +got):\n%s", diff)
	}
	// A re-create with other mutable parameters answers the modified
	// volume: they are not part of a volume's identity.
	again, err := d.CreateVolume(ctx, makeCreate("v", gi).mutable(map[string]string{"iops": "3000"}).CreateVolumeRequest)
	if err != nil || again.GetVolume().GetVolumeId() != vol.GetVolumeId() {
		t.Errorf("re-create = %v, %v; want volume %s", again, err, vol.GetVolumeId())
	}
}

// Each optional capability can be turned off: it is no longer advertised
// and its calls are UNIMPLEMENTED.
func TestOptionalCapabilities(t *testing.T) {
	optional := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	}
	tests := []struct {
		name            string
		mutate          func(*Config)
		want            []csi.ControllerServiceCapability_RPC_Type
		wantUnsupported []string
	}{
		{name: "all on", want: optional},
		{
			name:            "no snapshots",
			mutate:          func(c *Config) { c.DisableSnapshots = true },
			want:            optional[2:],
			wantUnsupported: []string{"CreateSnapshot", "DeleteSnapshot", "ListSnapshots"},
		},
		{name: "no cloning", mutate: func(c *Config) { c.DisableCloning = true }, want: []csi.ControllerServiceCapability_RPC_Type{optional[0], optional[1], optional[3]}},
		{
			name:            "no modification",
			mutate:          func(c *Config) { c.DisableModify = true },
			want:            optional[:3],
			wantUnsupported: []string{"ControllerModifyVolume"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, tc.mutate)
			vol := mustCreate(t, d, makeCreate("v", gi))
			resp, err := d.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []csi.ControllerServiceCapability_RPC_Type
			for _, c := range resp.GetCapabilities() {
				for _, o := range optional {
					if c.GetRpc().GetType() == o {
						got = append(got, o)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("optional capabilities (-want +got):\n%s", diff)
			}
			calls := map[string]func() error{
				"CreateSnapshot": func() error {
					_, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol.GetVolumeId()})
					return err
				},
				"DeleteSnapshot": func() error {
					_, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "snap-000001"})
					return err
				},
				"ListSnapshots": func() error { _, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{}); return err },
				"ControllerModifyVolume": func() error {
					_, err := d.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: vol.GetVolumeId(), MutableParameters: map[string]string{"iops": "1"}})
					return err
				},
			}
			for _, name := range []string{"CreateSnapshot", "ListSnapshots", "ControllerModifyVolume", "DeleteSnapshot"} {
				want := codes.OK
				for _, u := range tc.wantUnsupported {
					if u == name {
						want = codes.Unimplemented
					}
				}
				if got := status.Code(calls[name]()); got != want {
					t.Errorf("%s: code %v, want %v", name, got, want)
				}
			}
		})
	}
}
