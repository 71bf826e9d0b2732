package controlplane

import (
	"context"
	"fmt"
	"strconv"
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
// healthy; its log is kube-controller-manager-<n>.log.
func (c *Cluster) StartControllerManager(ctx context.Context) error {
	c.mu.Lock()
	if c.kcm != nil && !c.kcm.Exited() {
		c.mu.Unlock()
		return fmt.Errorf("kube-controller-manager is running")
	}
	c.kcmRestarts++
	name := fmt.Sprintf("kube-controller-manager-%d", c.kcmRestarts)
	c.mu.Unlock()
	p, err := startProcess(c.LogDir, name, c.kcmBinary, c.kcmArgs, nil)
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
	return c.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(c.kcmPort)+"/healthz", "")
}
