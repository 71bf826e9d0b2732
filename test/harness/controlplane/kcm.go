package controlplane

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// StopControllerManager kills kube-controller-manager (SIGKILL, as a crash):
// until StartControllerManager, no PV controller binds claims.
func (c *Cluster) StopControllerManager() {
	c.mu.Lock()
	p := c.kcm
	c.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// StartControllerManager starts kube-controller-manager again with its
// command line, after StopControllerManager, and waits until it is
// healthy; its log is kube-controller-manager-<n>.log. It listens on a new
// port: while it was down, another process (another test package's control
// plane) may have taken the old one, and that one's /healthz would answer
// for a kube-controller-manager that failed to start.
func (c *Cluster) StartControllerManager(ctx context.Context) error {
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.kcm != nil && !c.kcm.Exited() {
		c.mu.Unlock()
		return fmt.Errorf("kube-controller-manager is running")
	}
	c.kcmRestarts++
	name := fmt.Sprintf("kube-controller-manager-%d", c.kcmRestarts)
	c.kcmPort = ports[0]
	c.kcmArgs = withSecurePort(c.kcmArgs, c.kcmPort)
	args := c.kcmArgs
	c.mu.Unlock()
	p, err := startProcess(c.LogDir, name, c.kcmBinary, args, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for i, q := range c.core {
		if q == c.kcm {
			c.core[i] = p
		}
	}
	c.kcm = p
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", ""); err != nil {
		return err
	}
	// A process that could not listen exits at once: healthy, and still
	// running a moment later, is this one.
	time.Sleep(time.Second)
	if p.Exited() {
		return fmt.Errorf("kube-controller-manager exited after it started: %v (log %s)", p.Wait(), p.LogPath())
	}
	return nil
}

// withSecurePort is args with every --secure-port set to port.
func withSecurePort(args []string, port int) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, "--secure-port=") {
			a = "--secure-port=" + strconv.Itoa(port)
		}
		out[i] = a
	}
	return out
}
