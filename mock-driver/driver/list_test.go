package driver

import (
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

func TestListVolumesPages(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nil)
	var ids []string
	for i := 0; i < 5; i++ {
		resp, err := d.CreateVolume(ctx, makeCreate(fmt.Sprintf("v%d", i), gi/8).CreateVolumeRequest)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetVolume().GetVolumeId())
	}
	if _, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: ids[0], NodeId: "n1", VolumeCapability: mountCap()}); err != nil {
		t.Fatal(err)
	}
	list := func(token string, max int32) ([]string, string, error) {
		resp, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: token, MaxEntries: max})
		var got []string
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
		}
		return got, resp.GetNextToken(), err
	}

	page1, token, err := list("", 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids[:2], page1); diff != "" {
		t.Errorf("page 1 (-want +got):\n%s", diff)
	}
	// Deleting the last volume of a page does not shift the next page.
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	page2, token, err := list(token, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids[2:4], page2); diff != "" {
		t.Errorf("page 2 (-want +got):\n%s", diff)
	}
	page3, token, err := list(token, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids[4:], page3); diff != "" || token != "" {
		t.Errorf("page 3 (-want +got):\n%s; next token %q, want none", diff, token)
	}

	all, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all.GetEntries()); n != 4 {
		t.Errorf("%d volumes listed, want 4", n)
	}
	if diff := cmp.Diff([]string{"n1"}, all.GetEntries()[0].GetStatus().GetPublishedNodeIds()); diff != "" {
		t.Errorf("published nodes (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name  string
		token string
		max   int32
		want  codes.Code
	}{
		{name: "invalid token", token: "invalid-token", want: codes.Aborted},
		{name: "negative max entries", max: -1, want: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := list(tc.token, tc.max); status.Code(err) != tc.want {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.want)
			}
		})
	}
}

func TestGetCapacity(t *testing.T) {
	rack := func(z, r string) map[string]string {
		return map[string]string{"zone": z, "rack": r}
	}
	tests := []struct {
		name      string
		segments  []SegmentConfig
		topology  map[string]string
		wantFree  int64
		wantLarge int64
	}{
		{name: "all segments", topology: nil, wantFree: 3 * gi, wantLarge: 2 * gi},
		{name: "one segment", topology: zone("z1"), wantFree: gi, wantLarge: gi},
		{name: "a full segment", topology: zone("z3"), wantFree: 0, wantLarge: 0},
		{name: "an unknown segment", topology: zone("z9"), wantFree: 0, wantLarge: 0},
		{
			name: "a zone of racks sums them",
			segments: []SegmentConfig{
				{Topology: rack("z1", "r1"), CapacityBytes: gi}, {Topology: rack("z1", "r2"), CapacityBytes: 3 * gi},
				{Topology: rack("z2", "r1"), CapacityBytes: 5 * gi},
			},
			topology: zone("z1"), wantFree: 3 * gi, wantLarge: 3 * gi, // r1 is full
		},
		{
			name:     "unlimited counts as the largest volume",
			segments: []SegmentConfig{{Topology: map[string]string{"zone": "z1"}, CapacityBytes: -1}},
			topology: zone("z1"), wantFree: DefaultMaxVolumeBytes, wantLarge: DefaultMaxVolumeBytes,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, func(c *Config) {
				if tc.segments != nil {
					c.Segments = tc.segments
				}
			})
			// One GiB is used in z1, in its first segment with room.
			if _, err := d.CreateVolume(ctx, makeCreate("used", gi).requisite("z1").CreateVolumeRequest); err != nil {
				t.Fatal(err)
			}
			resp, err := d.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: &csi.Topology{Segments: tc.topology}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAvailableCapacity() != tc.wantFree || resp.GetMaximumVolumeSize().GetValue() != tc.wantLarge {
				t.Errorf("available %d, largest %d; want %d, %d", resp.GetAvailableCapacity(), resp.GetMaximumVolumeSize().GetValue(), tc.wantFree, tc.wantLarge)
			}
		})
	}
}
