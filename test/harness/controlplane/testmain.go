package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"k8s.io/klog/v2"
)

// RunTestMain starts one control plane for a test package, runs setup on it
// (which typically starts the project's processes with StartProcess), runs
// the tests and stops the plane, also on SIGINT/SIGTERM. When setup or tests
// fail it prints where the logs are and their tails. It returns the exit
// code for os.Exit.
func RunTestMain(m *testing.M, opts Options, setup func(context.Context, *Cluster) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	// A signal stops the plane even while tests run; the test binary then
	// fails on its own.
	interrupted := make(chan struct{})
	go func() {
		<-ctx.Done()
		select {
		case <-interrupted:
		default:
			fmt.Fprintln(os.Stderr, "interrupted: stopping the control plane")
			_ = c.Stop()
			os.Exit(130)
		}
	}()
	code := 1
	if err := setup(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "setting up the test cluster: %v\n", err)
	} else {
		code = m.Run()
	}
	close(interrupted)
	if code != 0 {
		c.DumpLogs(os.Stderr, 40)
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
	}
	return code
}

// RunTestMainWithOurScheduler is RunTestMain with the project's
// csi-topology-scheduler (built by BuildProject into a temp dir) as the
// plane's scheduler, configured by schedulerConfig (see
// Options.SchedulerConfig).
func RunTestMainWithOurScheduler(m *testing.M, schedulerConfig string, setup func(context.Context, *Cluster) error) int {
	return RunTestMainWithOurSchedulerOptions(m, Options{SchedulerConfig: schedulerConfig}, setup)
}

// RunTestMainWithOurSchedulerOptions is RunTestMainWithOurScheduler with
// the plane's other options too (e.g. more Controllers); it sets
// opts.SchedulerBinary.
func RunTestMainWithOurSchedulerOptions(m *testing.M, opts Options, setup func(context.Context, *Cluster) error) int {
	ctx := klog.NewContext(context.Background(), klog.Background())
	root, err := RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir, err := os.MkdirTemp("", "csi-topology-scheduler-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if err := BuildProject(ctx, root, binDir, "./cmd/csi-topology-scheduler"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts.SchedulerBinary = filepath.Join(binDir, "csi-topology-scheduler")
	return RunTestMain(m, opts, setup)
}
