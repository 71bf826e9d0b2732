package driver

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{name: "valid controller", mutate: func(*Config) {}},
		{name: "valid node", mutate: func(c *Config) { c.Mode = ModeNode; c.NodeID = "n1" }},
		{name: "plain socket path", mutate: func(c *Config) { c.Endpoint = "/tmp/x.sock" }},
		{name: "admin on localhost", mutate: func(c *Config) { c.AdminAddress = "localhost:0" }},
		{name: "admin on ::1", mutate: func(c *Config) { c.AdminAddress = "[::1]:9808" }},
		{name: "unknown mode", mutate: func(c *Config) { c.Mode = "sideways" }, wantErr: true},
		{name: "no endpoint", mutate: func(c *Config) { c.Endpoint = "" }, wantErr: true},
		{name: "tcp endpoint", mutate: func(c *Config) { c.Endpoint = "tcp://127.0.0.1:10000" }, wantErr: true},
		{name: "node without ID", mutate: func(c *Config) { c.Mode = ModeBoth }, wantErr: true},
		{name: "negative limit", mutate: func(c *Config) { c.MaxVolumesPerNode = -1 }, wantErr: true},
		{name: "negative node limit", mutate: func(c *Config) { c.NodeLimits = map[string]int64{"n1": -1} }, wantErr: true},
		{name: "admin on every interface", mutate: func(c *Config) { c.AdminAddress = ":9808" }, wantErr: true},
		{name: "admin on a public address", mutate: func(c *Config) { c.AdminAddress = "10.0.0.1:9808" }, wantErr: true},
		{name: "admin without port", mutate: func(c *Config) { c.AdminAddress = "127.0.0.1" }, wantErr: true},
		{name: "health on every interface", mutate: func(c *Config) { c.HealthAddress = ":9808" }},
		{name: "health on a public address", mutate: func(c *Config) { c.HealthAddress = "10.0.0.1:9808" }},
		{name: "health without port", mutate: func(c *Config) { c.HealthAddress = "0.0.0.0" }, wantErr: true},
		{
			name: "segment twice, once with the prefix",
			mutate: func(c *Config) {
				c.Segments = append(c.Segments, SegmentConfig{Topology: map[string]string{TopologyPrefix + "zone": "z1"}})
			},
			wantErr: true,
		},
		{name: "invalid fault", mutate: func(c *Config) { c.Faults = []faults.Rule{{Method: "Nope"}} }, wantErr: true},
		{name: "invalid late success", mutate: func(c *Config) { c.Faults = []faults.Rule{{Method: "CreateVolume", LateSuccess: true}} }, wantErr: true},
		{name: "no mutable parameter keys", mutate: func(c *Config) { c.MutableParameters = []string{} }},
		{name: "empty mutable parameter key", mutate: func(c *Config) { c.MutableParameters = []string{"iops", ""} }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.mutate(&cfg)
			_, err := New(cfg)
			if (err != nil) != tc.wantErr {
				t.Errorf("New error = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func TestParseSegment(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{in: "", want: map[string]string{}},
		{in: "zone=z1, rack=r1", want: map[string]string{TopologyPrefix + "zone": "z1", TopologyPrefix + "rack": "r1"}},
		{in: "topology.kubernetes.io/zone=z1", want: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		{in: "zone", wantErr: true},
		{in: "zone=", wantErr: true},
		{in: "zone=z1,zone=z2", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSegment(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("segment (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSegmentTable(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    SegmentTable
		wantErr bool
	}{
		{
			name: "segments and limits",
			in:   `{"segments":[{"topology":{"zone":"z1"},"capacityBytes":10737418240},{"topology":{"zone":"z2"}}],"nodeLimits":{"n1":2}}`,
			want: SegmentTable{
				Segments: []SegmentConfig{
					{Topology: map[string]string{TopologyPrefix + "zone": "z1"}, CapacityBytes: 10 * gi},
					{Topology: map[string]string{TopologyPrefix + "zone": "z2"}, CapacityBytes: -1},
				},
				NodeLimits: map[string]int64{"n1": 2},
			},
		},
		{name: "no segments", in: `{"segments":[]}`, wantErr: true},
		{name: "unknown field", in: `{"segments":[{"topology":{"zone":"z1"},"capacity":1}]}`, wantErr: true},
		{name: "unknown top-level field", in: `{"segments":[{"topology":{"zone":"z1"}}],"limits":{}}`, wantErr: true},
		{name: "not JSON", in: `segments: []`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSegmentTable([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}
