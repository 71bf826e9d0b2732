package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A node's instance releases its start-up pages unless the environment
// says otherwise; a central provisioner only when told to.
func TestReleaseStartupPages(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodeDeployment bool
		env            string
		want           bool
		wantErr        bool
	}{
		{"node instance", true, "", true, false},
		{"node instance, off", true, "false", false, false},
		{"central provisioner", false, "", false, false},
		{"central provisioner, on", false, "true", true, false},
		{"not a boolean", true, "sometimes", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := releaseStartupPages(tc.nodeDeployment, func(k string) string {
				if k == releasePagesEnv {
					return tc.env
				}
				return ""
			})
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("releaseStartupPages = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// A bad value stops the process at start, naming the variable.
func TestParseArgsReleasePagesEnv(t *testing.T) {
	t.Setenv(releasePagesEnv, "sometimes")
	_, _, err := parseArgs([]string{"--csi-address=/run/csi/socket"}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), releasePagesEnv) {
		t.Fatalf("parseArgs = %v, want an error naming %s", err, releasePagesEnv)
	}
	t.Setenv(releasePagesEnv, "true")
	c, _, err := parseArgs([]string{"--csi-address=/run/csi/socket"}, &strings.Builder{})
	if err != nil || !c.releasePages {
		t.Fatalf("parseArgs = %v, releasePages %v; want no error and true", err, c.releasePages)
	}
}

// The release once leading waits for the controller to lead, and does not
// happen when the context ends first.
func TestReleaseWhenLeading(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls, released := 0, 0
	releaseWhenLeading(ctx, func() bool { calls++; return calls >= 2 }, func() { released++ })
	if calls != 2 || released != 1 {
		t.Errorf("leading asked %d times, released %d times; want 2 and 1", calls, released)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	releaseWhenLeading(stopped, func() bool { return false }, func() { t.Error("released, though the context ended first") })
}
