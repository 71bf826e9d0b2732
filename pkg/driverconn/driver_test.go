package driverconn

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	testDriver = driver.DefaultName
	gi         = int64(1) << 30
)

func TestConnectDriver(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*driver.Config)
		want    DriverInfo
		wantErr string
	}{
		{name: "topology driver", want: DriverInfo{Name: testDriver, SupportsTopology: true, SupportsCapacity: true,
			SupportsClone: true, SupportsSnapshot: true, SupportsModify: true, SupportsAttach: true}},
		{name: "no topology", mutate: func(c *driver.Config) { c.DisableTopology = true }, want: DriverInfo{Name: testDriver, SupportsCapacity: true,
			SupportsClone: true, SupportsSnapshot: true, SupportsModify: true, SupportsAttach: true}},
		{name: "no snapshots, clones or modify", mutate: func(c *driver.Config) {
			c.DisableSnapshots, c.DisableCloning, c.DisableModify = true, true, true
		}, want: DriverInfo{Name: testDriver, SupportsTopology: true, SupportsCapacity: true, SupportsAttach: true}},
		{name: "node-only driver cannot provision", mutate: func(c *driver.Config) { c.Mode = driver.ModeNode; c.NodeID = "n1" }, wantErr: "has no controller service"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			mock := &mockProcess{t: t, socket: filepath.Join(shortDir(t), "csi.sock")}
			mock.start(ctx, tc.mutate)
			t.Cleanup(mock.stop)
			conn, info, err := Connect(ctx, "unix://"+mock.socket, nil, time.Second)
			if conn != nil {
				defer conn.Close()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, info); diff != "" {
				t.Errorf("driver info (-want +got):\n%s", diff)
			}
		})
	}
}
