package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	segJSON := write("segments.json", `{"segments":[{"topology":{"zone":"z1"},"capacityBytes":10737418240},{"topology":{"zone":"z2"}}],"nodeLimits":{"n1":1}}`)
	segYAML := write("segments.yaml", "segments:\n- topology: {zone: z1}\n  capacityBytes: 10737418240\n- topology:\n    zone: z2\nnodeLimits:\n  n1: 1\n")
	segBad := write("bad.json", `{"segments":[{"topology":{"zone":"z1"},"size":1}]}`)
	faultsYAML := write("faults.yaml", "- method: CreateVolume\n  code: ResourceExhausted\n  latency: 100ms\n  segment: {zone: z2}\n")
	nodesYAML := write("nodes.yaml", "kind-worker: {zone: z1}\nkind-worker2: {zone: z2, topology.kubernetes.io/region: r}\nsneaky: {zone: 'z1,rack=r9'}\n")
	faultsBad := write("faults-bad.json", `[{"method":"CreateVolumes"}]`)

	wantSegments := []driver.SegmentConfig{
		{Topology: map[string]string{driver.TopologyPrefix + "zone": "z1"}, CapacityBytes: 10 << 30},
		{Topology: map[string]string{driver.TopologyPrefix + "zone": "z2"}, CapacityBytes: -1},
	}
	base := func(mutate func(*driver.Config)) driver.Config {
		c := driver.Config{
			Name: driver.DefaultName, Endpoint: "unix:///run/csi/socket", Mode: driver.ModeBoth, Version: version,
			NodeTopology: map[string]string{}, MaxVolumeBytes: driver.DefaultMaxVolumeBytes,
			MutableParameters: driver.DefaultMutableParameters,
		}
		mutate(&c)
		return c
	}
	tests := []struct {
		name    string
		args    []string
		want    driver.Config
		wantErr bool
	}{
		{name: "defaults", args: []string{"--node-id=n1"}, want: base(func(c *driver.Config) { c.NodeID = "n1" })},
		{
			name: "node instance",
			args: []string{"--mode=node", "--node-id=n1", "--node-topology=zone=z1,rack=r1", "--max-volumes-per-node=3", "--endpoint=/tmp/n1.sock", "-v=5"},
			want: base(func(c *driver.Config) {
				c.Mode, c.NodeID, c.MaxVolumesPerNode, c.Endpoint = driver.ModeNode, "n1", 3, "/tmp/n1.sock"
				c.NodeTopology = map[string]string{driver.TopologyPrefix + "zone": "z1", driver.TopologyPrefix + "rack": "r1"}
			}),
		},
		{
			name: "node topology from a file",
			args: []string{"--mode=node", "--node-id=kind-worker2", "--node-topology-file=" + nodesYAML},
			want: base(func(c *driver.Config) {
				c.Mode, c.NodeID = driver.ModeNode, "kind-worker2"
				c.NodeTopology = map[string]string{driver.TopologyPrefix + "zone": "z2", "topology.kubernetes.io/region": "r"}
			}),
		},
		{name: "topology file value with a comma", args: []string{"--mode=node", "--node-id=sneaky", "--node-topology-file=" + nodesYAML}, wantErr: true},
		{name: "node missing from the topology file", args: []string{"--mode=node", "--node-id=other", "--node-topology-file=" + nodesYAML}, wantErr: true},
		{name: "topology file and flag", args: []string{"--mode=node", "--node-id=kind-worker", "--node-topology=zone=z1", "--node-topology-file=" + nodesYAML}, wantErr: true},
		{name: "topology file not a map", args: []string{"--mode=node", "--node-id=n1", "--node-topology-file=" + faultsYAML}, wantErr: true},
		{
			name: "controller with JSON segments",
			args: []string{"--mode=controller", "--segments-file=" + segJSON, "--state-file=/tmp/s.json", "--admin-address=127.0.0.1:0", "--known-nodes=n1,n2", "--disable-topology"},
			want: base(func(c *driver.Config) {
				c.Mode, c.Segments, c.NodeLimits = driver.ModeController, wantSegments, map[string]int64{"n1": 1}
				c.StateFile, c.AdminAddress, c.KnownNodes, c.DisableTopology = "/tmp/s.json", "127.0.0.1:0", []string{"n1", "n2"}, true
			}),
		},
		{
			name: "YAML segments and faults",
			args: []string{"--segments-file=" + segYAML, "--faults-file=" + faultsYAML, "--name=other.example.com", "--mode=controller"},
			want: base(func(c *driver.Config) {
				c.Mode = driver.ModeController
				c.Name, c.Segments, c.NodeLimits = "other.example.com", wantSegments, map[string]int64{"n1": 1}
				c.Faults = []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Latency: faults.Duration(100 * time.Millisecond), Segment: map[string]string{"zone": "z2"}}}
			}),
		},
		{
			name: "node instance with a health endpoint",
			args: []string{"--mode=node", "--node-id=n1", "--health-address=:9808"},
			want: base(func(c *driver.Config) { c.Mode, c.NodeID, c.HealthAddress = driver.ModeNode, "n1", ":9808" }),
		},
		{
			name: "without snapshots, cloning and modification",
			args: []string{"--mode=controller", "--disable-snapshots", "--disable-cloning", "--disable-modify"},
			want: base(func(c *driver.Config) {
				c.Mode, c.DisableSnapshots, c.DisableCloning, c.DisableModify = driver.ModeController, true, true, true
			}),
		},
		{
			name: "own mutable parameters",
			args: []string{"--mode=controller", "--mutable-parameters=tier,iops"},
			want: base(func(c *driver.Config) { c.Mode, c.MutableParameters = driver.ModeController, []string{"tier", "iops"} }),
		},
		{
			name: "no mutable parameters",
			args: []string{"--mode=controller", "--mutable-parameters="},
			want: base(func(c *driver.Config) { c.Mode, c.MutableParameters = driver.ModeController, []string{} }),
		},
		{name: "empty mutable parameter key", args: []string{"--mode=controller", "--mutable-parameters=iops,"}, wantErr: true},
		{name: "segment table with an unknown field", args: []string{"--segments-file=" + segBad}, wantErr: true},
		{name: "invalid fault", args: []string{"--faults-file=" + faultsBad}, wantErr: true},
		{name: "missing file", args: []string{"--segments-file=" + filepath.Join(dir, "nope.json")}, wantErr: true},
		{name: "bad topology", args: []string{"--node-topology=zone"}, wantErr: true},
		{name: "unknown flag", args: []string{"--zone=z1"}, wantErr: true},
		{name: "positional argument", args: []string{"extra"}, wantErr: true},
		{
			name: "node-local driver with its node's capacity",
			args: []string{"--mode=both", "--node-id=n1", "--node-topology=kubernetes.io/hostname=n1", "--capacity-bytes=10737418240"},
			want: base(func(c *driver.Config) {
				c.NodeID, c.NodeTopology = "n1", map[string]string{"kubernetes.io/hostname": "n1"}
				c.Segments = []driver.SegmentConfig{{Topology: map[string]string{"kubernetes.io/hostname": "n1"}, CapacityBytes: 10 << 30}}
			}),
		},
		{name: "capacity and segment table", args: []string{"--node-id=n1", "--capacity-bytes=1", "--segments-file=" + segJSON}, wantErr: true},
		{name: "capacity of a node instance", args: []string{"--mode=node", "--node-id=n1", "--capacity-bytes=1"}, wantErr: true},
		{name: "negative capacity", args: []string{"--node-id=n1", "--capacity-bytes=-2"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, o.cfg); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if _, err := driver.New(o.cfg); err != nil {
				t.Errorf("driver.New rejects the parsed config: %v", err)
			}
		})
	}
}
