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
