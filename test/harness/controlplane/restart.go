package controlplane

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RestartAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 15 s) and
// starts it again with the same command line, port and certificates; etcd
// keeps running with its data, so every object survives. Clients see their
// connections drop and watches end, as on a real control-plane upgrade. It
// returns once /readyz answers again; the new log is
// kube-apiserver-<n>.log.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	idx := -1
	for i, p := range c.core {
		if p.Name == "kube-apiserver" || strings.HasPrefix(p.Name, "kube-apiserver-") {
			idx = i
		}
	}
	if idx < 0 {
		c.mu.Unlock()
		return fmt.Errorf("no kube-apiserver in this cluster")
	}
	old := c.core[idx]
	n := 1
	if s, ok := strings.CutPrefix(old.Name, "kube-apiserver-"); ok {
		if i, err := strconv.Atoi(s); err == nil {
			n = i + 1
		}
	}
	c.mu.Unlock()
	old.Stop(15 * time.Second)
	p, err := startProcess(c.LogDir, fmt.Sprintf("kube-apiserver-%d", n), old.cmd.Path, old.cmd.Args[1:], nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.core[idx] = p
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.waitHealthy(ctx, c.server+"/readyz", c.RESTConfig.BearerToken)
}
