package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// observer timestamps, as the benchmark's watches see them, when each PV of
// one namespace's claims appears and disappears, when each claim is Bound
// and when each pod is scheduled. Safe for concurrent use.
type observer struct {
	ns string
	// pid, when set, is sampled at the first and last PV added and deleted.
	pid  int
	want int

	mu                       sync.Mutex
	pvAdded, pvGone          map[string]time.Time
	pvClaim                  map[string]string
	bound, scheduled         map[string]time.Time
	cpuFirstPV, cpuLastPV    float64
	cpuFirstGone, cpuLastGon float64
	// machine, when set, is sampled into atStart (watchMachine), atAllPVs
	// and atAllBound (the wanted counts reached).
	machine                       *machineProbe
	atStart, atAllPVs, atAllBound *machineSample
	changed                       chan struct{}
	stop                          context.CancelFunc
}

// observe starts watching ns (and the PVs of its claims) and returns once
// the watches have synced. want is the number of volumes of the run.
func observe(ctx context.Context, client kubernetes.Interface, ns string, want int) (*observer, error) {
	o := &observer{ns: ns, want: want, pvAdded: map[string]time.Time{}, pvGone: map[string]time.Time{}, pvClaim: map[string]string{},
		bound: map[string]time.Time{}, scheduled: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	ctx, o.stop = context.WithCancel(ctx)
	all := informers.NewSharedInformerFactory(client, 0)
	inNS := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{all.Core().V1().PersistentVolumes().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: o.pvAdd, DeleteFunc: o.pvDelete}},
		{inNS.Core().V1().PersistentVolumeClaims().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: o.claim, UpdateFunc: func(_, obj any) { o.claim(obj) }}},
		{inNS.Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: o.pod, UpdateFunc: func(_, obj any) { o.pod(obj) }}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			o.stop()
			return nil, err
		}
	}
	all.Start(ctx.Done())
	inNS.Start(ctx.Done())
	for _, f := range []informers.SharedInformerFactory{all, inNS} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				o.stop()
				return nil, fmt.Errorf("watch of %v did not sync", typ)
			}
		}
	}
	return o, nil
}

// Stop ends the watches.
func (o *observer) Stop() { o.stop() }

func (o *observer) notify() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// sample returns the CPU time of the observed process, 0 without one.
func (o *observer) sample() float64 {
	if o.pid == 0 {
		return 0
	}
	ms, _ := cpuMillis(o.pid)
	return ms
}

// setPid sets the process sampled at the first and last PV.
func (o *observer) setPid(pid int) {
	o.mu.Lock()
	o.pid = pid
	o.mu.Unlock()
}

// watchMachine samples the machine now, and once all wanted PVs exist and
// once all claims are Bound.
func (o *observer) watchMachine(p *machineProbe) {
	s := p.sample()
	o.mu.Lock()
	o.machine, o.atStart = p, &s
	o.mu.Unlock()
}

// sampleMachine returns a machine sample, nil without a probe; o.mu held.
func (o *observer) sampleMachine() *machineSample {
	if o.machine == nil {
		return nil
	}
	s := o.machine.sample()
	return &s
}

func (o *observer) pvAdd(obj any) {
	o.pvEvent(obj, o.pvAdded, &o.cpuFirstPV, &o.cpuLastPV, &o.atAllPVs)
}

func (o *observer) pvDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o.pvEvent(obj, o.pvGone, &o.cpuFirstGone, &o.cpuLastGon, nil)
}

// pvEvent records the first time a PV of the run's namespace is seen in
// seen (added or gone), and samples the CPU at the first and at the wanted
// count into first and last, and the machine at the wanted count into
// atAll when set.
func (o *observer) pvEvent(obj any, seen map[string]time.Time, first, last *float64, atAll **machineSample) {
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Namespace != o.ns {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := seen[pv.Name]; ok {
		return
	}
	seen[pv.Name] = time.Now()
	o.pvClaim[pv.Name] = pv.Spec.ClaimRef.Name
	switch len(seen) {
	case 1:
		*first = o.sample()
		if o.want == 1 {
			*last = *first
		}
	case o.want:
		*last = o.sample()
	}
	if len(seen) == o.want && atAll != nil {
		*atAll = o.sampleMachine()
	}
	o.notify()
}

func (o *observer) claim(obj any) {
	c, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok || c.Status.Phase != v1.ClaimBound {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.bound[c.Name]; !ok {
		o.bound[c.Name] = time.Now()
		if len(o.bound) == o.want {
			o.atAllBound = o.sampleMachine()
		}
		o.notify()
	}
}

func (o *observer) pod(obj any) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.scheduled[p.Name]; !ok {
		o.scheduled[p.Name] = time.Now()
		o.notify()
	}
}

// counts returns how many PVs appeared and went, claims are Bound and pods
// scheduled.
func (o *observer) counts() (added, gone, bound, scheduled int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pvAdded), len(o.pvGone), len(o.bound), len(o.scheduled)
}

// waitUntil waits until cond holds on the counts, the process dies, or
// timeout passes.
func (o *observer) waitUntil(ctx context.Context, timeout time.Duration, alive func() error, cond func(added, gone, bound, scheduled int) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if cond(o.counts()) {
			return nil
		}
		if err := alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			a, g, b, s := o.counts()
			return fmt.Errorf("timed out after %s: %d PVs created, %d deleted, %d claims Bound, %d pods scheduled", timeout, a, g, b, s)
		case <-o.changed:
		case <-tick.C:
		}
	}
}

// span returns the earliest and latest of times (zero without any).
func span(times map[string]time.Time) (first, last time.Time) {
	for _, t := range times {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return first, last
}
