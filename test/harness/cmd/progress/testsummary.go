package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// pkgState is what the summary keeps of a package until it ends.
type pkgState struct {
	started time.Time
	// running holds the top-level tests that have started and not ended.
	running map[string]time.Time
	// output holds each top-level test's output (subtests included) until
	// it ends; pkgOutput the output outside tests (TestMain, the verdict).
	output    map[string][]string
	pkgOutput []string
}

// testSummary prints go test's per-package lines, failed tests in full, and
// counts top-level tests.
type testSummary struct {
	log                     *os.File
	pkgs                    map[string]*pkgState
	finished                int
	passed, failed, skipped int
	failures                []string
}

func newTestSummary(logPath string) (*testSummary, error) {
	s := &testSummary{pkgs: map[string]*pkgState{}}
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		s.log = f
	}
	return s, nil
}

func (s *testSummary) close() {
	if s.log != nil {
		_ = s.log.Close()
	}
}

func (s *testSummary) line(l string) {
	var e event
	if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &e) != nil {
		// Not an event (go vet or the go command itself): show it.
		fmt.Println(l)
		s.writeLog(l + "\n")
		return
	}
	switch e.Action {
	case "build-output":
		fmt.Print(e.Output)
		s.writeLog(e.Output)
		return
	case "build-fail":
		return
	}
	if e.Output != "" {
		s.writeLog(e.Output)
	}
	p := s.pkg(e.Package, e.Time)
	if e.Test == "" {
		s.packageEvent(e, p)
		return
	}
	root, _, sub := strings.Cut(e.Test, "/")
	switch e.Action {
	case "run":
		if !sub {
			p.running[root] = e.Time
		}
	case "output":
		p.output[root] = append(p.output[root], e.Output)
	case "pass", "fail", "skip":
		if sub {
			return
		}
		delete(p.running, root)
		s.testEnded(e, p, root)
	}
}

func (s *testSummary) pkg(name string, at time.Time) *pkgState {
	p, ok := s.pkgs[name]
	if !ok {
		p = &pkgState{started: at, running: map[string]time.Time{}, output: map[string][]string{}}
		s.pkgs[name] = p
	}
	return p
}

func (s *testSummary) testEnded(e event, p *pkgState, root string) {
	switch e.Action {
	case "pass":
		s.passed++
	case "skip":
		s.skipped++
	case "fail":
		s.failed++
		s.failures = append(s.failures, e.Package+" "+root)
		fmt.Printf("--- FAIL: %s %s (%.1fs), its output:\n", e.Package, root, e.Elapsed)
		for _, o := range p.output[root] {
			fmt.Print("    " + o)
		}
	}
	delete(p.output, root)
}

func (s *testSummary) packageEvent(e event, p *pkgState) {
	switch e.Action {
	case "output":
		p.pkgOutput = append(p.pkgOutput, e.Output)
	case "pass":
		s.finished++
		fmt.Printf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		delete(s.pkgs, e.Package)
	case "skip":
		s.finished++
		delete(s.pkgs, e.Package)
	case "fail":
		s.finished++
		fmt.Printf("FAIL\t%s\t%.3fs, output outside tests:\n", e.Package, e.Elapsed)
		for _, o := range p.pkgOutput {
			fmt.Print("    " + o)
		}
		// Tests still "running" when the package failed (a timeout or a
		// crash): show what they printed.
		for root := range p.running {
			s.failed++
			s.failures = append(s.failures, e.Package+" "+root+" (did not finish)")
			fmt.Printf("--- unfinished: %s %s, its output:\n", e.Package, root)
			for _, o := range p.output[root] {
				fmt.Print("    " + o)
			}
		}
		delete(s.pkgs, e.Package)
	}
}

func (s *testSummary) writeLog(text string) {
	if s.log != nil {
		_, _ = s.log.WriteString(text)
	}
}

func (s *testSummary) status() string {
	if len(s.pkgs) == 0 {
		return fmt.Sprintf("compiling and linking test binaries (%d packages finished)", s.finished)
	}
	names := make([]string, 0, len(s.pkgs))
	for n := range s.pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	now := time.Now()
	parts := make([]string, 0, len(names))
	for _, n := range names {
		p := s.pkgs[n]
		short := n[strings.LastIndex(n, "/")+1:]
		if len(p.running) == 0 {
			parts = append(parts, fmt.Sprintf("%s (%s, between tests)", short, now.Sub(p.started).Round(time.Second)))
			continue
		}
		for t, at := range p.running {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", short, t, now.Sub(at).Round(time.Second)))
		}
	}
	return fmt.Sprintf("%d packages finished; running: %s", s.finished, strings.Join(parts, ", "))
}

func (s *testSummary) finish(elapsed time.Duration) {
	fmt.Printf("go test finished in %s\n", elapsed.Round(time.Second))
	for _, f := range s.failures {
		fmt.Println("FAILED:", f)
	}
	fmt.Printf("%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
}
