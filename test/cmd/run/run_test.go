package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/controlplane"
)

// output collects a command's output; the command writes, the test reads.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// session returns the live processes of session sid (zombies, which hold
// nothing, left out).
func session(t *testing.T, sid int) []proc {
	t.Helper()
	all, err := processes()
	if err != nil {
		t.Fatal(err)
	}
	var out []proc
	for _, p := range all {
		if p.session == sid && p.state != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// clusterDir returns the cluster's temp dir, read from etcd's --data-dir,
// or "" while etcd does not run.
func clusterDir(procs []proc) string {
	for _, p := range procs {
		if p.comm != "etcd" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if dir, ok := strings.CutPrefix(arg, "--data-dir="); ok {
				return filepath.Dir(dir)
			}
		}
	}
	return ""
}

// TestMakeRunStops runs `make run` (which builds bin/ if needed, like a
// user's first call) and signals make alone, as kill(1) does: during
// start-up (kube-apiserver running) and once the table is printed. Within
// 10 s make must have exited, no process it started may be left (make runs
// in a session of its own, which every process it starts inherits) and the
// cluster's temp dir must be gone; an interrupt is not reported as a crash.
func TestMakeRunStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the control plane through make")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if signal.Ignored(syscall.SIGINT) {
		// go test runs in the background (SIGINT ignored), and make keeps a
		// signal ignored at its start ignored. Catching it here changes
		// nothing for this process and gives make the default disposition.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGINT)
	}
	for _, tc := range []struct {
		name   string
		signal syscall.Signal
		// group sends the signal to make's process group, as Ctrl-C does.
		group bool
		// ready reports when to send the signal.
		ready func(out string, procs []proc) bool
	}{
		{name: "SIGINT during start-up", signal: syscall.SIGINT, ready: apiserverRuns},
		{name: "SIGTERM during start-up", signal: syscall.SIGTERM, ready: apiserverRuns},
		{name: "Ctrl-C during start-up", signal: syscall.SIGINT, group: true, ready: apiserverRuns},
		{name: "SIGINT once up", signal: syscall.SIGINT, ready: func(out string, _ []proc) bool {
			return strings.Contains(out, "The cluster stays up")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := 1
			if tc.group {
				target = -1
			}
			runAndSignal(t, root, tc.signal, target, tc.ready)
		})
	}
}

func apiserverRuns(_ string, procs []proc) bool {
	for _, p := range procs {
		if p.comm == "kube-apiserver" {
			return true
		}
	}
	return false
}

// runAndSignal starts make run, waits until ready, sends sig to make
// (target 1) or to its process group (target -1) and checks the aftermath.
func runAndSignal(t *testing.T, root string, sig syscall.Signal, target int, ready func(string, []proc) bool) {
	var out output
	cmd := exec.Command("make", "--no-print-directory", "run", "ARGS=--timeout=3m")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		for _, p := range session(t, sid) { // after a failure: leave nothing
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		<-exited
	})

	// The first run may build the control plane (minutes); then ~30 s.
	timeout := 12 * time.Minute
	if deadline, ok := t.Deadline(); ok {
		timeout = time.Until(deadline) - 30*time.Second
	}
	var dir string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			t.Fatalf("make run ended before the signal:\n%s", out.String())
		default:
		}
		procs := session(t, sid)
		if d := clusterDir(procs); d != "" {
			dir = d
		}
		return ready(out.String(), procs), nil
	})
	if err != nil {
		t.Fatalf("make run never got ready for the signal: %v\n%s", err, out.String())
	}
	if dir == "" {
		t.Fatalf("no etcd seen in make's session:\n%s", out.String())
	}
	if err := syscall.Kill(target*sid, sig); err != nil { // make leads its session and group
		t.Fatal(err)
	}
	signalled := time.Now()
	// stopBudget is not a speed claim (it usually takes under a second) but
	// the worst case of the design: kube-apiserver gets 15 s to stop before
	// SIGKILL, then etcd stops; on a loaded machine that happens.
	const stopBudget = 30 * time.Second
	select {
	case <-exited:
		t.Logf("make exited %s after %v", time.Since(signalled).Round(100*time.Millisecond), sig)
	case <-time.After(stopBudget):
		t.Fatalf("make still runs %v after %v; processes: %v\n%s", stopBudget, sig, session(t, sid), out.String())
	}
	if left := session(t, sid); len(left) > 0 {
		t.Errorf("processes left after make exited: %v", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's temp dir %s is left (stat: %v)", dir, err)
	}
	text := out.String()
	// make reports "Interrupt" or "Terminated", not "Error <status>".
	for _, crash := range []string{"signal: killed", "--- last", "] Error "} {
		if strings.Contains(text, crash) {
			t.Errorf("the output shows %q, as if the run had failed:\n%s", crash, text)
		}
	}
	if !strings.Contains(text, "make run: stopped") {
		t.Errorf("the output does not say that the run stopped:\n%s", text)
	}
}
