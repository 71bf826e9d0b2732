package main

import (
	"bytes"
	"context"
	"fmt"
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

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
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
// start-up (kube-apiserver running), once the table is printed, and from
// the recipe's shell just before bin/run starts (make then handles the
// signal before bin/run can look at it). Within 30 s make must have exited,
// no process it started may be left (make runs in a session of its own,
// which every process it starts inherits) and the cluster's temp dir must
// be gone; an interrupt is not reported as a crash.
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
	up := func(out string, _ []proc) bool { return strings.Contains(out, "The cluster stays up") }
	for _, tc := range []struct {
		name string
		s    sender
	}{
		{name: "SIGINT during start-up", s: sender{sig: syscall.SIGINT, to: toMake, ready: apiserverRuns}},
		{name: "SIGTERM during start-up", s: sender{sig: syscall.SIGTERM, to: toMake, ready: apiserverRuns}},
		{name: "Ctrl-C during start-up", s: sender{sig: syscall.SIGINT, to: toGroup, ready: apiserverRuns}},
		{name: "SIGINT once up", s: sender{sig: syscall.SIGINT, to: toMake, ready: up}},
		{name: "SIGINT before the program starts", s: sender{sig: syscall.SIGINT, to: fromRecipe, ready: recipeSignalled}},
	} {
		t.Run(tc.name, func(t *testing.T) { runAndSignal(t, root, tc.s) })
	}
}

// sender tells runAndSignal which signal goes where, and when.
type sender struct {
	sig syscall.Signal
	to  target
	// ready reports when the signal is (to be) sent.
	ready func(out string, procs []proc) bool
}

type target int

const (
	// toMake sends the signal to make's process alone, as kill(1),
	// timeout(1) --foreground or a process supervisor do.
	toMake target = iota
	// toGroup sends it to make's process group, as a terminal's Ctrl-C does.
	toGroup
	// fromRecipe has the recipe's shell send it to make (testdata/signal-make.sh
	// in ARGS) after make started the recipe and before bin/run runs: make
	// handles it before bin/run exists.
	fromRecipe
)

// send sends the signal to make (pid, which leads its session and group)
// or to its group.
func (s sender) send(t *testing.T, pid int) {
	t.Helper()
	if s.to == toGroup {
		pid = -pid
	}
	if err := syscall.Kill(pid, s.sig); err != nil {
		t.Fatal(err)
	}
}

// recipeSignalled is the ready of fromRecipe: signal-make.sh said it sent
// the signal.
func recipeSignalled(out string, _ []proc) bool {
	return strings.Contains(out, "signal-make.sh: sent")
}

func apiserverRuns(_ string, procs []proc) bool {
	for _, p := range procs {
		if p.comm == "kube-apiserver" {
			return true
		}
	}
	return false
}

// runAndSignal starts make run, waits until s.ready, sends s.sig as s.to
// says and checks the aftermath.
func runAndSignal(t *testing.T, root string, s sender) {
	var out output
	args := "--timeout=3m"
	if s.to == fromRecipe {
		args += fmt.Sprintf(" $$(bash test/harness/cmd/run/testdata/signal-make.sh $$PPID %s)", strings.TrimPrefix(unix.SignalName(s.sig), "SIG"))
	}
	cmd := exec.Command("make", "--no-print-directory", "run", "ARGS="+args)
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
	var dir string // the cluster's temp dir, once seen
	t.Cleanup(func() {
		for _, p := range session(t, sid) { // after a failure: leave nothing
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		<-exited
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	})

	// The first run may build the control plane (minutes); then ~30 s.
	timeout := 12 * time.Minute
	if deadline, ok := t.Deadline(); ok {
		timeout = time.Until(deadline) - 30*time.Second
	}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		procs := session(t, sid)
		if d := clusterDir(procs); d != "" {
			dir = d
		}
		if s.ready(out.String(), procs) {
			return true, nil
		}
		select {
		case <-exited:
			t.Fatalf("make run ended before the signal:\n%s", out.String())
		default:
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("make run never got ready for the signal: %v\n%s", err, out.String())
	}
	signalled := time.Now()
	if s.to != fromRecipe {
		if dir == "" {
			t.Fatalf("no etcd seen in make's session:\n%s", out.String())
		}
		s.send(t, sid)
	}
	sig := s.sig
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
	if dir != "" {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the cluster's temp dir %s is left (stat: %v)", dir, err)
		}
	}
	checkStoppedOutput(t, out.String())
}

// checkStoppedOutput checks that make run's output tells of a stop, not a
// failure: make reports "Interrupt" or "Terminated", not "Error <status>".
func checkStoppedOutput(t *testing.T, text string) {
	t.Helper()
	for _, crash := range []string{"signal: killed", "--- last", "] Error "} {
		if strings.Contains(text, crash) {
			t.Errorf("the output shows %q, as if the run had failed:\n%s", crash, text)
		}
	}
	if !strings.Contains(text, "make run: stopped") {
		t.Errorf("the output does not say that the run stopped:\n%s", text)
	}
}
