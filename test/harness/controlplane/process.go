package controlplane

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process with its output in a log file.
type Process struct {
	Name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	stopMu  sync.Mutex
}

// startProcess starts binary with its output in logDir/<name>.log. The
// child is killed when the test binary dies (Pdeathsig).
func startProcess(logDir, name, binary string, args, env []string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// LogPath is the process's log file.
func (p *Process) LogPath() string { return p.logPath }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to end and returns its exit error.
func (p *Process) Wait() error {
	<-p.done
	return p.waitErr
}

// Stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill sends SIGKILL (a crash) and waits for the process to end.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string {
	var b strings.Builder
	p.tail(&b, n)
	return b.String()
}

// tail writes the last n lines of the process's log to w.
func (p *Process) tail(w io.Writer, n int) {
	f, err := os.Open(p.logPath)
	if err != nil {
		fmt.Fprintf(w, "  (%v)\n", err)
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintf(w, "  (reading: %v)\n", err)
	}
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
}
