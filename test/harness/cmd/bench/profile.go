package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// profiler fetches Go profiles of our provisioner (--enable-pprof) during
// a run: CPU from launch for a while, and the heap at the end.
type profiler struct {
	dir, addr, prefix string
	done              chan struct{}
}

// startProfiler returns the provisioner flags that serve pprof and starts
// fetching a CPU profile of seconds once the endpoint answers; nil without
// --profile-dir.
func (e *env) startProfiler(ctx context.Context, name string, seconds int) (*profiler, []string, error) {
	if e.opts.ProfileDir == "" {
		return nil, nil, nil
	}
	addr, err := lab.FreeAddr()
	if err != nil {
		return nil, nil, err
	}
	p := &profiler{dir: e.opts.ProfileDir, addr: addr, prefix: fmt.Sprintf("%s-%dnodes", name, e.size), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if err := p.fetch(ctx, fmt.Sprintf("profile?seconds=%d", seconds), "cpu.pprof"); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return p, []string{"--http-endpoint=" + addr, "--enable-pprof"}, nil
}

// endpoint is the provisioner's --http-endpoint the profiler set, "" for
// none.
func (p *profiler) endpoint() string {
	if p == nil {
		return ""
	}
	return p.addr
}

// heap saves the heap profile and waits for the CPU profile.
func (p *profiler) heap(ctx context.Context) {
	if p == nil {
		return
	}
	if err := p.fetch(ctx, "heap", "heap.pprof"); err != nil {
		klog.FromContext(ctx).Error(err, "Heap profile")
	}
	<-p.done
}

func (p *profiler) fetch(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(p.dir, p.prefix+"-"+file))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
