package driver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

// Every Controller service call is recorded with its whole request as JSON,
// secret keys kept and their values emptied; node and identity calls are
// not recorded, and no record holds a secret value.
func TestCallRecordsCarryRedactedRequests(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, nil)
	secrets := map[string]string{"password": "hunter2", "user": "admin-s3cret"}
	req := makeCreate("v", gi).requisite("z1").params(map[string]string{"type": "fast"}).CreateVolumeRequest
	req.CapacityRange.LimitBytes = 2 * gi
	req.VolumeCapabilities = []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs", MountFlags: []string{"noatime"}}},
	}}
	req.Secrets = secrets
	vol, err := c.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, Secrets: secrets,
		MutableParameters: map[string]string{"iops": "3000"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Method, Name, VolumeID, Code string
		SecretKeys                   []string
		Request                      map[string]any
	}
	var got []summary
	for _, r := range d.Calls("") {
		s := summary{Method: r.Method, Name: r.Name, VolumeID: r.VolumeID, Code: r.Code, SecretKeys: r.SecretKeys}
		if err := json.Unmarshal(r.Request, &s.Request); err != nil {
			t.Fatalf("%s: request %s: %v", r.Method, r.Request, err)
		}
		got = append(got, s)
	}
	redacted := map[string]any{"password": "", "user": ""}
	keys := []string{"password", "user"}
	want := []summary{
		{Method: "CreateVolume", Name: "v", Code: "OK", SecretKeys: keys, Request: map[string]any{
			"name": "v", "capacityRange": map[string]any{"requiredBytes": "1073741824", "limitBytes": "2147483648"},
			"volumeCapabilities": []any{map[string]any{"accessMode": map[string]any{"mode": "MULTI_NODE_READER_ONLY"},
				"mount": map[string]any{"fsType": "xfs", "mountFlags": []any{"noatime"}}}},
			"parameters": map[string]any{"type": "fast"}, "secrets": redacted,
			"accessibilityRequirements": map[string]any{"requisite": []any{map[string]any{"segments": map[string]any{TopologyPrefix + "zone": "z1"}}}},
		}},
		{Method: "ControllerModifyVolume", VolumeID: id, Code: "OK", SecretKeys: keys, Request: map[string]any{
			"volumeId": id, "secrets": redacted, "mutableParameters": map[string]any{"iops": "3000"}}},
		{Method: "DeleteVolume", VolumeID: id, Code: "OK", SecretKeys: keys, Request: map[string]any{"volumeId": id, "secrets": redacted}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if data, _ := json.Marshal(d.Calls("")); strings.Contains(string(data), "hunter2") || strings.Contains(string(data), "s3cret") {
		t.Errorf("records hold a secret value: %s", data)
	}
	if req.Secrets["password"] != "hunter2" {
		t.Errorf("recording changed the caller's request: secrets %v", req.Secrets)
	}
	if got := len(d.Requests()); got != 1 {
		t.Errorf("Requests() has %d records, want the one CreateVolume", got)
	}
}
