package imagebuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestParsePlatforms(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []v1.Platform
		wantErr bool
	}{
		{name: "two", in: "linux/amd64, linux/arm64", want: []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}},
		{name: "one, trailing comma", in: "linux/arm64,", want: []v1.Platform{{OS: "linux", Architecture: "arm64"}}},
		{name: "no arch", in: "linux", wantErr: true},
		{name: "variant", in: "linux/arm/v7", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePlatforms(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("platforms (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want map[string]string
	}{
		{
			name: "all set",
			cfg:  Config{Version: "v0.1.0", Revision: "abc", Source: "https://example.com/x", Licenses: "Apache-2.0", Created: testEpoch},
			want: map[string]string{
				LabelTitle: "mock-driver", LabelVersion: "v0.1.0", LabelCreated: "2023-11-14T22:13:20Z",
				LabelRevision: "abc", LabelSource: "https://example.com/x", LabelLicenses: "Apache-2.0",
			},
		},
		{
			name: "empty ones left out",
			cfg:  Config{Version: "dev", Created: testEpoch},
			want: map[string]string{LabelTitle: "mock-driver", LabelVersion: "dev", LabelCreated: "2023-11-14T22:13:20Z"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.cfg.labels("mock-driver")); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

// The sidecars that dial a driver's socket run as root, as upstream's
// image; the others as nonroot.
func TestUserOf(t *testing.T) {
	for _, tc := range []struct {
		binary, want string
	}{
		{binary: "csi-provisioner", want: "0:0"},
		{binary: "csi-node-publisher", want: "0:0"},
		{binary: "csi-node-router", want: "65532:65532"},
		{binary: "csi-topology-scheduler", want: "65532:65532"},
		{binary: "csi-scheduler-extender", want: "65532:65532"},
		{binary: "kubectl-csi_topology", want: "65532:65532"},
		{binary: "mock-driver", want: "65532:65532"},
	} {
		t.Run(tc.binary, func(t *testing.T) {
			var c Config
			if got := c.ImageConfig(tc.binary).User; got != tc.want {
				t.Errorf("user of %s = %q, want %q", tc.binary, got, tc.want)
			}
		})
	}
}

// TestRootBinaries: a binary named in RootBinaries runs as root (the lab's
// stand-in for upstream's node-driver-registrar, whose image does), the
// others keep their user.
func TestRootBinaries(t *testing.T) {
	c := Config{RootBinaries: []string{"registrar"}}
	for _, tc := range []struct {
		binary, want string
	}{
		{binary: "registrar", want: "0:0"},
		{binary: "rwcheck", want: "65532:65532"},
		{binary: "csi-provisioner", want: "0:0"},
	} {
		t.Run(tc.binary, func(t *testing.T) {
			if got := c.ImageConfig(tc.binary).User; got != tc.want {
				t.Errorf("user of %s = %q, want %q", tc.binary, got, tc.want)
			}
		})
	}
}
