package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

// mustCreate creates a volume or fails the test.
func mustCreate(t *testing.T, d *Driver, r createReq) *csi.Volume {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	resp, err := d.CreateVolume(ctx, r.CreateVolumeRequest)
	if err != nil {
		t.Fatalf("creating volume %s: %v", r.Name, err)
	}
	return resp.GetVolume()
}

// mustSnapshot snapshots a volume or fails the test.
func mustSnapshot(t *testing.T, d *Driver, name, volumeID string) *csi.Snapshot {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	resp, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		t.Fatalf("creating snapshot %s: %v", name, err)
	}
	return resp.GetSnapshot()
}

func TestCreateSnapshot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	src := mustCreate(t, d, makeCreate("src", 1536<<20).requisite("z2"))
	other := mustCreate(t, d, makeCreate("other", gi).requisite("z1"))
	snap := mustSnapshot(t, d, "s", src.GetVolumeId())
	if snap.GetSnapshotId() != "snap-000001" || snap.GetSourceVolumeId() != src.GetVolumeId() ||
		snap.GetSizeBytes() != 1536<<20 || !snap.GetReadyToUse() || snap.GetCreationTime().AsTime().IsZero() {
		t.Errorf("snapshot %v: want snap-000001 of %s, 1.5 GiB, ready, with a creation time", snap, src.GetVolumeId())
	}
	if got := d.Snapshots()[0].Segment; !cmp.Equal(got, zone("z2")) {
		t.Errorf("snapshot segment %v, want the source's, z2", got)
	}
	tests := []struct {
		name     string
		req      *csi.CreateSnapshotRequest
		wantCode codes.Code
		wantID   string
	}{
		{name: "same name and source: the same snapshot", req: &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: src.GetVolumeId()}, wantID: "snap-000001"},
		{name: "same name, other source", req: &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: other.GetVolumeId()}, wantCode: codes.AlreadyExists},
		{name: "same name, other parameters", req: &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: src.GetVolumeId(), Parameters: map[string]string{"a": "b"}}, wantCode: codes.AlreadyExists},
		{name: "no name", req: &csi.CreateSnapshotRequest{SourceVolumeId: src.GetVolumeId()}, wantCode: codes.InvalidArgument},
		{name: "no source", req: &csi.CreateSnapshotRequest{Name: "t"}, wantCode: codes.InvalidArgument},
		{name: "unknown source", req: &csi.CreateSnapshotRequest{Name: "t", SourceVolumeId: "vol-999999"}, wantCode: codes.NotFound},
		{name: "a new name", req: &csi.CreateSnapshotRequest{Name: "t", SourceVolumeId: other.GetVolumeId()}, wantID: "snap-000002"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.CreateSnapshot(ctx, tc.req)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if got := resp.GetSnapshot().GetSnapshotId(); got != tc.wantID {
				t.Errorf("snapshot ID %q, want %q", got, tc.wantID)
			}
		})
	}
	// A snapshot outlives its source volume and does not count against the
	// segment's capacity.
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: src.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Snapshots()); n != 2 {
		t.Errorf("%d snapshots after deleting the source, want 2", n)
	}
	if used := d.Segments()[1].UsedBytes; used != 0 {
		t.Errorf("z2 uses %d bytes with only a snapshot in it, want 0", used)
	}
}

func TestDeleteSnapshot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	vol := mustCreate(t, d, makeCreate("v", gi))
	snap := mustSnapshot(t, d, "s", vol.GetVolumeId())
	for _, id := range []string{snap.GetSnapshotId(), snap.GetSnapshotId(), "snap-424242", "not-a-snapshot"} {
		if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
			t.Errorf("deleting %s: %v", id, err)
		}
	}
	if n := len(d.Snapshots()); n != 0 {
		t.Errorf("%d snapshots left", n)
	}
	if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("delete without ID: code %v, want InvalidArgument", status.Code(err))
	}
}

func TestListSnapshots(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	a := mustCreate(t, d, makeCreate("a", gi).requisite("z1"))
	b := mustCreate(t, d, makeCreate("b", gi).requisite("z2"))
	for _, s := range []struct{ name, vol string }{{"s1", a.GetVolumeId()}, {"s2", b.GetVolumeId()}, {"s3", a.GetVolumeId()}, {"s4", b.GetVolumeId()}, {"s5", a.GetVolumeId()}} {
		mustSnapshot(t, d, s.name, s.vol)
	}
	ids := func(resp *csi.ListSnapshotsResponse) []string {
		var out []string
		for _, e := range resp.GetEntries() {
			out = append(out, e.GetSnapshot().GetSnapshotId())
		}
		return out
	}
	tests := []struct {
		name      string
		req       *csi.ListSnapshotsRequest
		want      []string
		wantToken string
		wantCode  codes.Code
	}{
		{name: "all", req: &csi.ListSnapshotsRequest{}, want: []string{"snap-000001", "snap-000002", "snap-000003", "snap-000004", "snap-000005"}},
		{name: "first page", req: &csi.ListSnapshotsRequest{MaxEntries: 2}, want: []string{"snap-000001", "snap-000002"}, wantToken: "snap-000002"},
		{name: "the rest", req: &csi.ListSnapshotsRequest{StartingToken: "snap-000002"}, want: []string{"snap-000003", "snap-000004", "snap-000005"}},
		{name: "last page exactly full", req: &csi.ListSnapshotsRequest{StartingToken: "snap-000003", MaxEntries: 2}, want: []string{"snap-000004", "snap-000005"}},
		{name: "by ID", req: &csi.ListSnapshotsRequest{SnapshotId: "snap-000004"}, want: []string{"snap-000004"}},
		{name: "unknown ID", req: &csi.ListSnapshotsRequest{SnapshotId: "snap-000009"}},
		{name: "by source volume", req: &csi.ListSnapshotsRequest{SourceVolumeId: a.GetVolumeId()}, want: []string{"snap-000001", "snap-000003", "snap-000005"}},
		{name: "by source volume, paged", req: &csi.ListSnapshotsRequest{SourceVolumeId: a.GetVolumeId(), MaxEntries: 1, StartingToken: "snap-000001"}, want: []string{"snap-000003"}, wantToken: "snap-000003"},
		{name: "unknown source volume", req: &csi.ListSnapshotsRequest{SourceVolumeId: "vol-424242"}},
		{name: "invalid token", req: &csi.ListSnapshotsRequest{StartingToken: "vol-000001"}, wantCode: codes.Aborted},
		{name: "negative max entries", req: &csi.ListSnapshotsRequest{MaxEntries: -1}, wantCode: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.ListSnapshots(ctx, tc.req)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, ids(resp)); diff != "" {
				t.Errorf("IDs (-want +got):\n%s", diff)
			}
			if resp.GetNextToken() != tc.wantToken {
				t.Errorf("next token %q, want %q", resp.GetNextToken(), tc.wantToken)
			}
			for _, e := range resp.GetEntries() {
				if s := e.GetSnapshot(); s.GetSizeBytes() != gi || !s.GetReadyToUse() || s.GetCreationTime() == nil {
					t.Errorf("listed snapshot %v: want 1 GiB, ready, with a creation time", s)
				}
			}
		})
	}
}
