// Command progress runs one step of `make test` and keeps a newcomer told
// what it is doing: never two minutes without a line.
//
//	progress -label "go build" -packages -- go build -v ./...
//	progress -label "go test" -test -log .test-output.log -- go test -json ./...
//
// Without -test it passes the command's output through and, every -every,
// prints how long the step has run. With -packages, lines that are package
// paths (what `go build -v` prints) are counted instead of printed, and the
// status line says how many were compiled and which was last.
//
// With -test the command must be `go test -json`: it prints one line per
// package as go test does ("ok", "FAIL", "?"), the whole output of every
// failed test and of a failed package's TestMain, a status line naming the
// packages and tests still running, and at the end "N passed, N failed,
// N skipped" (top-level tests). The plain text of every event goes to -log.
//
// The exit code is the command's.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	label    string
	every    time.Duration
	packages bool
	test     bool
	logPath  string
}

func main() {
	var o options
	fs := flag.NewFlagSet("progress", flag.ExitOnError)
	fs.StringVar(&o.label, "label", "step", "Name of the step in status lines.")
	fs.DurationVar(&o.every, "every", 30*time.Second, "Print a status line this often.")
	fs.BoolVar(&o.packages, "packages", false, "Count package paths (go build -v) instead of printing them.")
	fs.BoolVar(&o.test, "test", false, "The command is `go test -json`: summarise it.")
	fs.StringVar(&o.logPath, "log", "", "With -test: write the plain test output here.")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "progress: no command given")
		os.Exit(2)
	}
	os.Exit(run(o, fs.Args()))
}

func run(o options, argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = os.Stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "progress:", err)
		return 1
	}
	cmd.Stderr = cmd.Stdout // one stream, in order
	var sink lineSink
	if o.test {
		s, err := newTestSummary(o.logPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "progress:", err)
			return 1
		}
		defer s.close()
		sink = s
	} else {
		sink = &passThrough{countPackages: o.packages}
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "progress: starting %s: %v\n", argv[0], err)
		return 1
	}
	// The command is in our process group: a Ctrl-C reaches it directly.
	// A signal sent to us alone is passed on.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				fmt.Printf("[%s] %s: %s\n", o.label, time.Since(start).Round(time.Second), sink.status())
				mu.Unlock()
			}
		}
	}()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		mu.Lock()
		sink.line(sc.Text())
		mu.Unlock()
	}
	err = cmd.Wait()
	close(done)
	mu.Lock()
	defer mu.Unlock()
	sink.finish(time.Since(start))
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			if code := ee.ExitCode(); code > 0 {
				return code
			}
		}
		return 1
	}
	return 0
}

// lineSink consumes the command's output line by line. Calls are
// serialised by the caller.
type lineSink interface {
	line(string)
	status() string
	finish(elapsed time.Duration)
}

// passThrough prints every line, or counts package paths.
type passThrough struct {
	countPackages bool
	compiled      int
	last          string
}

func (p *passThrough) line(l string) {
	if p.countPackages && isPackagePath(l) {
		p.compiled++
		p.last = l
		return
	}
	fmt.Println(l)
}

func (p *passThrough) status() string {
	if !p.countPackages {
		return "still running"
	}
	if p.compiled == 0 {
		return "still running (nothing compiled yet: reading modules or linking)"
	}
	return fmt.Sprintf("%d packages compiled so far, last %s", p.compiled, p.last)
}

func (p *passThrough) finish(elapsed time.Duration) {
	if p.countPackages {
		fmt.Printf("done in %s (%d packages compiled, the rest cached)\n", elapsed.Round(time.Second), p.compiled)
		return
	}
	fmt.Printf("done in %s\n", elapsed.Round(time.Second))
}

// isPackagePath reports whether a line of `go build -v` output names a
// package: one word, no spaces, no colon (errors carry "file:line:").
func isPackagePath(l string) bool {
	if l == "" || strings.ContainsAny(l, " \t:") {
		return false
	}
	return !strings.HasPrefix(l, "#")
}
