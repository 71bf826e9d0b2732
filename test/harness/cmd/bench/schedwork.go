package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Scheduler CPU per pod, read from /proc, moves by ±15 % between runs of the
// same binary on a 2-core machine: the pods are scheduled in a burst of a
// few seconds that competes with kube-apiserver and etcd for both cores. So
// wffc also reads what each scheduler did from its own /metrics, which does
// not depend on the machine's load: the bytes its Go heap allocated, its GC
// cycles, and how many nodes it ran the Filter plugins on.

// schedWork is a snapshot of a scheduler's cumulative counters.
type schedWork struct {
	// allocBytes is go_memstats_alloc_bytes_total.
	allocBytes float64
	// gcCycles is go_gc_cycles_total_gc_cycles_total.
	gcCycles float64
	// filtered is scheduler_plugin_evaluation_total of VolumeBinding's
	// Filter: one per node the pod was filtered on (every profile of
	// both schedulers runs VolumeBinding).
	filtered float64
}

// metricsClient reads a scheduler's /metrics on 127.0.0.1. The schedulers
// serve it with a self-signed certificate generated at start-up, so the
// certificate is not verified; the admin token authorizes the request.
var metricsClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback, self-signed
}

// schedulerWork reads the counters of the scheduler process pid (its
// --secure-port from its command line).
func (e *env) schedulerWork(ctx context.Context, pid int) (schedWork, error) {
	port, err := securePort(pid)
	if err != nil {
		return schedWork{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+port+"/metrics", nil)
	if err != nil {
		return schedWork{}, err
	}
	req.Header.Set("Authorization", "Bearer "+e.cluster.RESTConfig.BearerToken)
	resp, err := metricsClient.Do(req)
	if err != nil {
		return schedWork{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return schedWork{}, fmt.Errorf("scheduler /metrics: %s", resp.Status)
	}
	var w schedWork
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "go_memstats_alloc_bytes_total "):
			w.allocBytes = sampleValue(line)
		case strings.HasPrefix(line, "go_gc_cycles_total_gc_cycles_total "):
			w.gcCycles = sampleValue(line)
		case strings.HasPrefix(line, "scheduler_plugin_evaluation_total{") &&
			strings.Contains(line, `extension_point="Filter"`) && strings.Contains(line, `plugin="VolumeBinding"`):
			w.filtered += sampleValue(line)
		}
	}
	return w, sc.Err()
}

// sampleValue is the value of one sample line of the text format (no
// timestamps in a scheduler's output); 0 when it does not parse.
func sampleValue(line string) float64 {
	i := strings.LastIndexByte(line, ' ')
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return 0
	}
	return v
}

// securePort is the --secure-port of process pid.
func securePort(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", err
	}
	for _, arg := range strings.Split(string(data), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--secure-port="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("process %d has no --secure-port", pid)
}

// perPod sets the run's scheduler work per pod from two snapshots.
func (w schedWork) perPod(r *Result, before schedWork, pods int) {
	n := float64(pods)
	r.SchedulerAllocKBPerPod = (w.allocBytes - before.allocBytes) / 1e3 / n
	r.SchedulerGCPer100Pods = (w.gcCycles - before.gcCycles) * 100 / n
	r.SchedulerFilteredPerPod = (w.filtered - before.filtered) / n
}
