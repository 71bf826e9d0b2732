package driver

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

func TestAdminAPI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, func(c *Config) { c.AdminAddress = "127.0.0.1:0" })
	if !strings.HasPrefix(d.AdminURL(), "http://127.0.0.1:") {
		t.Fatalf("AdminURL() = %q", d.AdminURL())
	}
	vol, err := c.CreateVolume(ctx, makeCreate("v", gi).requisite("z1").params(map[string]string{"type": "fast"}).
		mutable(map[string]string{"iops": "3000"}).CreateVolumeRequest)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol.GetVolume().GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVolume(ctx, makeCreate("r", gi).from(snapshotSource(snap.GetSnapshot().GetSnapshotId())).CreateVolumeRequest); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), MutableParameters: map[string]string{"throughput": "250"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), NodeId: "n1", VolumeCapability: mountCap()}); err != nil {
		t.Fatal(err)
	}
	do := func(t *testing.T, method, path, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, d.AdminURL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	tests := []struct {
		name, method, path, body string
		want                     int
		wantBody                 string // a substring
	}{
		{name: "healthz", method: "GET", path: "/healthz", want: 200, wantBody: "ok"},
		{name: "volumes", method: "GET", path: "/volumes", want: 200, wantBody: `"publishedNodes":["n1"]`},
		{name: "volume's mutable parameters", method: "GET", path: "/volumes", want: 200, wantBody: `"mutableParameters":{"iops":"3000","throughput":"250"}`},
		{name: "restored volume's source", method: "GET", path: "/volumes", want: 200, wantBody: `"contentSource":{"snapshotId":"snap-000001"}`},
		{name: "snapshots", method: "GET", path: "/snapshots", want: 200, wantBody: `"sourceVolumeId":"vol-000001","sizeBytes":1073741824,"segment":{"` + TopologyPrefix + `zone":"z1"}`},
		{name: "requests", method: "GET", path: "/requests?method=CreateVolume", want: 200, wantBody: `"name":"v"`},
		{name: "request's mutable parameters", method: "GET", path: "/requests", want: 200, wantBody: `"mutableParameters":{"iops":"3000"}`},
		{name: "request's content source", method: "GET", path: "/requests", want: 200, wantBody: `"contentSource":{"snapshotId":"snap-000001"}`},
		{name: "requests of another controller method", method: "GET", path: "/requests?method=ControllerModifyVolume", want: 200, wantBody: `"request":{"volumeId":"vol-000001","mutableParameters":{"throughput":"250"}}`},
		{name: "publish requests", method: "GET", path: "/requests?method=ControllerPublishVolume", want: 200, wantBody: `"method":"ControllerPublishVolume"`},
		{name: "no requests of a method", method: "GET", path: "/requests?method=DeleteVolume", want: 200, wantBody: `[]`},
		{name: "requests of a node method", method: "GET", path: "/requests?method=NodeStageVolume", want: 400},
		{name: "requests of an unknown method", method: "GET", path: "/requests?method=DeleteVolumes", want: 400},
		{name: "malformed faults", method: "PUT", path: "/faults", body: "{not json", want: 400},
		{name: "faults: unknown field", method: "PUT", path: "/faults", body: `[{"method":"CreateVolume","colour":"red"}]`, want: 400},
		{name: "faults: trailing data", method: "PUT", path: "/faults", body: `[] []`, want: 400},
		{name: "faults: unknown method", method: "PUT", path: "/faults", body: `[{"method":"CreateVolumes"}]`, want: 400},
		{name: "faults: body too large", method: "PUT", path: "/faults", body: `[` + strings.Repeat(" ", maxAdminBody) + `]`, want: 413},
		{name: "faults", method: "PUT", path: "/faults", body: `[{"method":"CreateVolume","code":"RESOURCE_EXHAUSTED","segment":{"zone":"z2"}}]`, want: 200, wantBody: TopologyPrefix + "zone"},
		{name: "faults: late success without latency", method: "PUT", path: "/faults", body: `[{"method":"CreateVolume","lateSuccess":true}]`, want: 400},
		{name: "faults: late success", method: "PUT", path: "/faults", body: `[{"method":"DeleteVolume","latency":"1h","lateSuccess":true,"count":1}]`, want: 200, wantBody: `"lateSuccess":true`},
		{name: "faults again", method: "PUT", path: "/faults", body: `[{"method":"CreateVolume","code":"RESOURCE_EXHAUSTED","segment":{"zone":"z2"}}]`, want: 200},
		{name: "list faults", method: "GET", path: "/faults", want: 200, wantBody: `"code":"RESOURCE_EXHAUSTED"`},
		{name: "segments", method: "GET", path: "/segments", want: 200, wantBody: `"usedBytes":2147483648`}, // v and its restore,
		{name: "capacity", method: "PUT", path: "/segments", body: `{"topology":{"zone":"z3"},"capacityBytes":1073741824}`, want: 200},
		{name: "capacity: unknown segment", method: "PUT", path: "/segments", body: `{"topology":{"zone":"z9"},"capacityBytes":1}`, want: 400},
		{name: "capacity: no bytes", method: "PUT", path: "/segments", body: `{"topology":{"zone":"z3"}}`, want: 400},
		{name: "capacity: malformed", method: "PUT", path: "/segments", body: `{"topology":`, want: 400},
		{name: "wrong method", method: "POST", path: "/volumes", want: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, body := do(t, tc.method, tc.path, tc.body)
			if got != tc.want || !strings.Contains(body, tc.wantBody) {
				t.Errorf("%s %s = %d %q, want %d with %q", tc.method, tc.path, got, body, tc.want, tc.wantBody)
			}
		})
	}

	// The admin changes took effect.
	if _, err := c.CreateVolume(ctx, makeCreate("in-z3", gi).requisite("z3").CreateVolumeRequest); err != nil {
		t.Errorf("z3 after raising its capacity: %v", err)
	}
	if _, err := c.CreateVolume(ctx, makeCreate("in-z2", gi).preferred("z2").CreateVolumeRequest); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("z2 with a fault: code %v, want ResourceExhausted", status.Code(err))
	}
	if got, _ := do(t, "DELETE", "/faults", ""); got != 204 {
		t.Errorf("DELETE /faults = %d", got)
	}
	if rules := d.Faults().Rules(); len(rules) != 0 {
		t.Errorf("rules after DELETE: %v", rules)
	}
	// GET /volumes decodes into state.Volume, as test/harness/lab reads it.
	_, body := do(t, "GET", "/volumes", "")
	var vols []state.Volume
	if err := json.Unmarshal([]byte(body), &vols); err != nil {
		t.Fatal(err)
	}
	if len(vols) != 3 || vols[0].Segment[TopologyPrefix+"zone"] != "z1" || vols[0].Parameters["type"] != "fast" {
		t.Errorf("volumes %+v", vols)
	}
}

func TestSetFaultsNormalizesSegments(t *testing.T) {
	d := newTestDriver(t, nil)
	if err := d.SetFaults([]faults.Rule{{Method: "CreateVolume", Segment: map[string]string{"zone": "z1", "example.com/rack": "r1"}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{TopologyPrefix + "zone": "z1", "example.com/rack": "r1"}
	if diff := cmp.Diff(want, d.Faults().Rules()[0].Segment); diff != "" {
		t.Errorf("segment (-want +got):\n%s", diff)
	}
}
