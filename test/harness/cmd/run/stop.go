package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// stopped is why the run stops early: the signal it got, or the one its
// parent got (SIGTERM when the parent ended). main ends by that signal, as a
// program that cleans up on a signal should, so that make reports
// "Interrupt" or "Terminated" rather than an error.
type stopped struct {
	sig syscall.Signal
	// parent tells that the parent, not this process, got sig.
	parent string
}

func (s stopped) Error() string {
	if s.parent != "" {
		return s.parent
	}
	return s.sig.String()
}

// notifyContext is signal.NotifyContext for SIGINT and SIGTERM, with the
// signal as the context's cause (a stopped).
func notifyContext(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			cancel(stopped{sig: sig.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx
}

// fatalSignals are the signals after which GNU make stops. It passes SIGTERM
// on to its children; on SIGINT, SIGHUP and SIGQUIT it passes nothing on (a
// terminal signals the whole foreground process group, kill(1) does not)
// and waits for its children.
var fatalSignals = []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTERM}

// watchParent returns a context that ends when the parent process ends
// (PR_SET_PDEATHSIG delivers SIGTERM, which the caller's signal handling
// turns into its own end, and a poll catches the race before prctl) or, when
// the parent is make, when make handles a fatal signal: make then resets
// that signal to its default disposition, which /proc shows (SigCgt), and
// waits for its children, which would otherwise never end. make catches
// every fatal signal it did not find ignored at its start (SigIgn), so one
// that is neither caught nor ignored when this process starts is one make
// got before: between starting the recipe and this look.
func watchParent(ctx context.Context) (context.Context, error) {
	ppid := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return nil, fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	gone := stopped{sig: syscall.SIGTERM, parent: "the parent process (make) ended"}
	if os.Getppid() != ppid { // the parent ended before prctl
		cancel(gone)
		return ctx, nil
	}
	var fatal uint64
	if isMake(ppid) {
		d, err := signalDispositions(ppid)
		if err != nil {
			cancel(err)
			return nil, err
		}
		fatal = d.handling()
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if os.Getppid() != ppid {
			cancel(gone)
			return
		}
		if fatal == 0 {
			return
		}
		d, err := signalDispositions(ppid)
		if err != nil {
			cancel(gone)
			return
		}
		for _, sig := range fatalSignals {
			if bit := sigBit(sig); fatal&bit != 0 && d.caught&bit == 0 {
				klog.FromContext(ctx).V(2).Info("The parent handles a fatal signal", "parent", ppid, "signal", sig)
				cancel(stopped{sig: sig, parent: "make got " + sig.String()})
				return
			}
		}
	}, 200*time.Millisecond)
	return ctx, nil
}

// dispositions are a process's masks of caught and of ignored signals
// (bit n-1 for signal n).
type dispositions struct {
	caught, ignored uint64
}

// handling returns the mask of the fatal signals to watch in make's
// dispositions d: those not ignored, or none if make catches none of them
// (a make that does not handle signals as GNU make does).
func (d dispositions) handling() uint64 {
	var fatal uint64
	for _, s := range fatalSignals {
		fatal |= sigBit(s)
	}
	fatal &^= d.ignored
	if d.caught&fatal == 0 {
		return 0
	}
	return fatal
}

func sigBit(sig syscall.Signal) uint64 { return 1 << (uint(sig) - 1) }

// isMake reports whether process pid is GNU make.
func isMake(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	name := strings.TrimSpace(string(comm))
	return err == nil && (name == "make" || name == "gmake")
}

// signalDispositions returns process pid's caught and ignored signals, the
// SigCgt and SigIgn lines of /proc/<pid>/status.
func signalDispositions(pid int) (dispositions, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return dispositions{}, err
	}
	return parseDispositions(data)
}

// parseDispositions parses the SigCgt and SigIgn lines of the content of
// /proc/<pid>/status.
func parseDispositions(status []byte) (dispositions, error) {
	var d dispositions
	found := 0
	for _, line := range strings.Split(string(status), "\n") {
		name, value, _ := strings.Cut(line, ":")
		var dst *uint64
		switch name {
		case "SigCgt":
			dst = &d.caught
		case "SigIgn":
			dst = &d.ignored
		default:
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return dispositions{}, fmt.Errorf("%s in /proc status: %w", name, err)
		}
		*dst = mask
		found++
	}
	if found != 2 {
		return dispositions{}, fmt.Errorf("no SigCgt and SigIgn in /proc status %q", status)
	}
	return d, nil
}

// interruptGroup sends SIGINT to the processes this one started in its own
// process group (a `go build` of the control plane and its compilers and
// linkers; the cluster's processes have groups of their own and are stopped
// in order by Cluster.Stop) and waits up to grace for them to end. The
// SIGKILL of exec.CommandContext would reach go alone and leave a linker
// running for a minute. An interrupted go build leaves its work directory:
// see goTempDir.
func interruptGroup(ctx context.Context, grace time.Duration) {
	logger := klog.FromContext(ctx)
	self, pgrp := os.Getpid(), syscall.Getpgrp()
	_ = wait.PollUntilContextTimeout(context.WithoutCancel(ctx), 100*time.Millisecond, grace, true, func(context.Context) (bool, error) {
		all, err := processes()
		if err != nil {
			return false, err
		}
		left := 0
		for _, p := range descendants(all, self) {
			if p.pgrp == pgrp && p.state != "Z" {
				left++
				logger.V(2).Info("Interrupting", "pid", p.pid, "command", p.comm)
				_ = syscall.Kill(p.pid, syscall.SIGINT)
			}
		}
		return left == 0, nil
	})
}

// goTempDir makes the go commands this process starts (GOTMPDIR) put their
// work directories in a new temp dir, and returns a function that removes
// it: an interrupted go build leaves its work directory behind.
func goTempDir() (func(), error) {
	dir, err := os.MkdirTemp("", "make-run-go-")
	if err != nil {
		return nil, err
	}
	if err := os.Setenv("GOTMPDIR", dir); err != nil {
		return nil, err
	}
	return func() { _ = os.RemoveAll(dir) }, nil
}
