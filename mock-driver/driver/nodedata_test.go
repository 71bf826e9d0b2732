package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataName(t *testing.T) {
	long := strings.Repeat("/", 100)
	sum := sha256.Sum256([]byte(long))
	tests := []struct {
		id   string
		want string
	}{
		{id: "vol-000001", want: "vol-000001"},
		{id: "Vol_1", want: "Vol_1"},
		{id: ".", want: "%2E"},
		{id: "..", want: "%2E%2E"},
		{id: "../x", want: "%2E%2E%2Fx"},
		{id: "/", want: "%2F"},
		{id: "a/../../b", want: "a%2F%2E%2E%2F%2E%2E%2Fb"},
		{id: "x.img", want: "x%2Eimg"},
		{id: "%2F", want: "%252F"},
		{id: "~a", want: "%7Ea"},
		{id: "a b\n", want: "a%20b%0A"},
		{id: strings.Repeat("a", 128), want: strings.Repeat("a", 128)},
		{id: long, want: "~" + hex.EncodeToString(sum[:])},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			got := dataName(tc.id)
			if got != tc.want {
				t.Errorf("dataName(%q) = %q, want %q", tc.id, got, tc.want)
			}
			if strings.ContainsAny(got, "/.") || len(got)+len(".img") > 255 {
				t.Errorf("dataName(%q) = %q is no safe file name", tc.id, got)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("dataName(%q) = dataName(%q) = %q", tc.id, other, got)
			}
			seen[got] = tc.id
			d := &Driver{cfg: Config{DataDir: "/data"}}
			for _, block := range []bool{false, true} {
				if p := d.dataPath(tc.id, block); filepath.Dir(p) != "/data" {
					t.Errorf("dataPath(%q, block=%t) = %q, not directly below /data", tc.id, block, p)
				}
			}
		})
	}
}

func TestDataDirIsAbsolute(t *testing.T) {
	if _, err := New(Config{Endpoint: "/tmp/x.sock", Mode: ModeController, DataDir: "/"}); err != nil {
		if !strings.Contains(err.Error(), "Linux") {
			t.Fatal(err)
		}
		t.Skipf("no data directories here: %v", err)
	}
	d := newTestDriver(t, func(c *Config) { nodeConfig(c); c.DataDir = "rel/data" })
	if !filepath.IsAbs(d.cfg.DataDir) || !strings.HasSuffix(d.cfg.DataDir, "/rel/data") {
		t.Errorf("DataDir %q, want an absolute path ending in /rel/data", d.cfg.DataDir)
	}
}
