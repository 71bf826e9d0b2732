package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// A caller that waits for another's build (make run while make test builds
// the control plane) says so at once instead of waiting in silence, and
// gets the lock when the other lets it go.
func TestLockFileSaysItWaits(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	path := filepath.Join(t.TempDir(), ".lock")
	unlock, err := lockFile(ctx, path, "the control plane")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "Waiting") {
		t.Errorf("a free lock was waited for:\n%s", logs.String())
	}
	got := make(chan error, 1)
	go func() {
		second, err := lockFile(ctx, path, "the control plane")
		if err == nil {
			second()
		}
		got <- err
	}()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(logs.String(), "Waiting for another process that builds the control plane"), nil
	})
	if err != nil {
		t.Errorf("no line while waiting for the lock:\n%s", logs.String())
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lock was not taken after it was released")
	}
}
