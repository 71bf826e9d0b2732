package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

func volumeSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

func snapshotSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func (r createReq) from(src *csi.VolumeContentSource) createReq {
	r.VolumeContentSource = src
	return r
}

func (r createReq) limit(bytes int64) createReq {
	r.CapacityRange.LimitBytes = bytes
	return r
}

// A clone or restore goes into its source's segment, and only there: the
// requirements can exclude it (RESOURCE_EXHAUSTED), never move it; with
// regional snapshots a restore goes where the requirements allow.
func TestCreateVolumeFromSource(t *testing.T) {
	// z1 and z2 have 2 GiB each; the source (1 GiB, z2) and its snapshot
	// exist in every case, so z2 has 1 GiB left.
	const srcID, snapID = "vol-000001", "snap-000001"
	tests := []struct {
		name     string
		mutate   func(*Config)
		req      createReq
		wantSize int64
		want     map[string]string
		wantCode codes.Code
	}{
		{name: "clone: the source's segment", req: makeCreate("c", gi).from(volumeSource(srcID)), wantSize: gi, want: zone("z2")},
		{name: "restore: the snapshot's segment", req: makeCreate("c", gi).from(snapshotSource(snapID)), wantSize: gi, want: zone("z2")},
		{name: "no size: the source's", req: makeCreate("c", 0).from(snapshotSource(snapID)), wantSize: gi, want: zone("z2")},
		{
			name:     "preferred elsewhere does not move it",
			req:      makeCreate("c", gi).from(volumeSource(srcID)).requisite("z1", "z2").preferred("z1"),
			wantSize: gi, want: zone("z2"),
		},
		{
			name:     "requisite excludes the source's segment",
			req:      makeCreate("c", gi).from(volumeSource(srcID)).requisite("z1"),
			wantCode: codes.ResourceExhausted,
		},
		{
			name:     "requisite excludes the snapshot's segment",
			req:      makeCreate("c", gi).from(snapshotSource(snapID)).requisite("z1", "z3"),
			wantCode: codes.ResourceExhausted,
		},
		{
			name:     "no room in the source's segment, though z1 has",
			req:      makeCreate("c", 2*gi).from(volumeSource(srcID)),
			wantCode: codes.ResourceExhausted,
		},
		{name: "smaller than the source", req: makeCreate("c", gi/2).from(volumeSource(srcID)), wantCode: codes.OutOfRange},
		{name: "limit below the source", req: makeCreate("c", 0).limit(gi / 2).from(snapshotSource(snapID)), wantCode: codes.OutOfRange},
		{name: "unknown source volume", req: makeCreate("c", gi).from(volumeSource("vol-424242")), wantCode: codes.NotFound},
		{name: "unknown snapshot", req: makeCreate("c", gi).from(snapshotSource("snap-424242")), wantCode: codes.NotFound},
		{name: "empty volume ID", req: makeCreate("c", gi).from(volumeSource("")), wantCode: codes.InvalidArgument},
		{name: "empty snapshot ID", req: makeCreate("c", gi).from(snapshotSource("")), wantCode: codes.InvalidArgument},
		{name: "no kind of source", req: makeCreate("c", gi).from(&csi.VolumeContentSource{}), wantCode: codes.InvalidArgument},
		{
			name:     "cloning disabled",
			mutate:   func(c *Config) { c.DisableCloning = true },
			req:      makeCreate("c", gi).from(volumeSource(srcID)),
			wantCode: codes.InvalidArgument,
		},
		{
			name:     "snapshots disabled",
			mutate:   func(c *Config) { c.DisableSnapshots = true },
			req:      makeCreate("c", gi).from(snapshotSource(snapID)),
			wantCode: codes.InvalidArgument,
		},
		{
			name:     "regional snapshots: a restore goes where preferred",
			mutate:   func(c *Config) { c.RegionalSnapshots = true },
			req:      makeCreate("c", gi).from(snapshotSource(snapID)).requisite("z1", "z2").preferred("z1"),
			wantSize: gi, want: zone("z1"),
		},
		{
			name:     "regional snapshots: a restore outside the snapshot's segment",
			mutate:   func(c *Config) { c.RegionalSnapshots = true },
			req:      makeCreate("c", gi).from(snapshotSource(snapID)).requisite("z1"),
			wantSize: gi, want: zone("z1"),
		},
		{
			name:     "regional snapshots: a clone still stays in its source's segment",
			mutate:   func(c *Config) { c.RegionalSnapshots = true },
			req:      makeCreate("c", gi).from(volumeSource(srcID)).requisite("z1"),
			wantCode: codes.ResourceExhausted,
		},
		{
			name:     "topology disabled: requirements ignored, still the source's segment",
			mutate:   func(c *Config) { c.DisableTopology = true },
			req:      makeCreate("c", gi).from(volumeSource(srcID)).requisite("z1"),
			wantSize: gi,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, tc.mutate)
			// The snapshot is cut with snapshots enabled, as a driver that
			// had them could have left it.
			src := mustCreate(t, d, makeCreate("src", gi).withTopology(zone("z2")))
			if err := d.store.Update(func(data *state.Data) error {
				id := data.NewSnapshotID()
				data.Snapshots[id] = &state.Snapshot{ID: id, Name: "s", SourceVolumeID: src.GetVolumeId(), SizeBytes: gi, Segment: zone("z2")}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			resp, err := d.CreateVolume(ctx, tc.req.CreateVolumeRequest)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err != nil {
				if n := len(d.Volumes()); n != 1 {
					t.Errorf("%d volumes after a failed create, want only the source", n)
				}
				return
			}
			vol := resp.GetVolume()
			if vol.GetCapacityBytes() != tc.wantSize {
				t.Errorf("size %d, want %d", vol.GetCapacityBytes(), tc.wantSize)
			}
			var want []*csi.Topology
			if tc.want != nil {
				want = []*csi.Topology{{Segments: tc.want}}
			}
			if diff := cmp.Diff(want, vol.GetAccessibleTopology(), protocmp.Transform()); diff != "" {
				t.Errorf("accessible topology (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.req.GetVolumeContentSource(), vol.GetContentSource(), protocmp.Transform()); diff != "" {
				t.Errorf("content source not echoed (-want +got):\n%s", diff)
			}
			// The copy counts against its segment like any volume.
			for _, s := range d.Segments() {
				inSource := cmp.Equal(s.Topology, d.Volumes()[0].Segment)
				if tc.want != nil && !cmp.Equal(tc.want, zone("z2")) {
					if cmp.Equal(s.Topology, tc.want) && s.UsedBytes != tc.wantSize {
						t.Errorf("the copy's segment uses %d bytes, want %d", s.UsedBytes, tc.wantSize)
					}
					continue
				}
				if inSource && s.UsedBytes != gi+tc.wantSize {
					t.Errorf("the source's segment uses %d bytes, want %d", s.UsedBytes, gi+tc.wantSize)
				}
			}
		})
	}
}

// A re-create of a clone answers the same volume for the same source, and
// ALREADY_EXISTS for another source or none.
func TestCreateVolumeFromSourceIdempotency(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	a := mustCreate(t, d, makeCreate("a", gi).requisite("z1"))
	b := mustCreate(t, d, makeCreate("b", gi).requisite("z2"))
	clone := mustCreate(t, d, makeCreate("c", gi).from(volumeSource(a.GetVolumeId())))
	tests := []struct {
		name     string
		req      createReq
		wantCode codes.Code
	}{
		{name: "same source", req: makeCreate("c", gi).from(volumeSource(a.GetVolumeId()))},
		{name: "another volume", req: makeCreate("c", gi).from(volumeSource(b.GetVolumeId())), wantCode: codes.AlreadyExists},
		{name: "no source", req: makeCreate("c", gi), wantCode: codes.AlreadyExists},
		{name: "a snapshot", req: makeCreate("c", gi).from(snapshotSource("snap-000001")), wantCode: codes.AlreadyExists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.CreateVolume(ctx, tc.req.CreateVolumeRequest)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err == nil && resp.GetVolume().GetVolumeId() != clone.GetVolumeId() {
				t.Errorf("volume %s, want %s", resp.GetVolume().GetVolumeId(), clone.GetVolumeId())
			}
		})
	}
	// The source may go; the clone stays and lists its source.
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	list, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: b.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetEntries()); n != 1 || list.GetEntries()[0].GetVolume().GetContentSource().GetVolume().GetVolumeId() != a.GetVolumeId() {
		t.Errorf("listed %v, want the clone of %s", list.GetEntries(), a.GetVolumeId())
	}
}
