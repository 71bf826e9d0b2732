package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// capacityArgs turn capacity tracking on for the wffc runs.
var capacityArgs = []string{"--enable-capacity", "--capacity-namespace=" + lab.CapacityNamespace, "--capacity-poll-interval=1h"}

// upstreamCapacity are capacityArgs in upstream external-provisioner's
// terms: it has no --capacity-namespace but reads $NAMESPACE, and it needs
// --capacity-ownerref-level=-1 to publish without an owning Pod.
var upstreamCapacity = struct{ args, env []string }{
	args: []string{"--enable-capacity", "--capacity-ownerref-level=-1", "--capacity-poll-interval=1h"},
	env:  []string{"NAMESPACE=" + lab.CapacityNamespace},
}

// runWFFC is scenario B with any contender: N pod + claim pairs of a
// WaitForFirstConsumer class, with capacity tracking on, scheduled once by
// the stock kube-scheduler and once by csi-topology-scheduler (the plugin).
func (e *env) runWFFC(ctx context.Context, contender string, rep int) ([]Result, error) {
	if err := e.prepareWFFC(ctx); err != nil {
		return nil, err
	}
	// Odd reps run the stock scheduler first, even reps the plugin: what a
	// run leaves behind (deleted objects still in the watch streams, a
	// warmer apiserver) does not always fall on the same scheduler.
	order := []string{"stock", "plugin"}
	if rep%2 == 0 {
		order = []string{"plugin", "stock"}
	}
	var out []Result
	for _, sched := range order {
		r, err := e.runWFFCWith(ctx, contender, rep, sched)
		if err != nil {
			return nil, fmt.Errorf("%s scheduler: %w", sched, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// prepareWFFC creates the CSIDriver object (storageCapacity: true) and
// starts csi-topology-scheduler beside the stock scheduler, once.
func (e *env) prepareWFFC(ctx context.Context) error {
	if e.secondScheduler != nil {
		return nil
	}
	_, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: lab.DriverName},
		Spec:       storagev1.CSIDriverSpec{StorageCapacity: ptr.To(true), AttachRequired: ptr.To(false)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binary := filepath.Join(e.lab.BinDir, "csi-topology-scheduler")
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("wffc needs csi-topology-scheduler (make build): %w", err)
	}
	e.secondScheduler, err = e.lab.StartSecondScheduler(ctx, binary)
	return err
}

// runWFFCWith runs the pairs through one scheduler.
func (e *env) runWFFCWith(ctx context.Context, contender string, rep int, sched string) (Result, error) {
	n := e.opts.Claims
	r := e.newResult("wffc", contender, rep)
	r.Scheduler = sched
	ns, err := e.namespace(ctx, "wffc-"+sched)
	if err != nil {
		return r, err
	}
	o, err := observe(ctx, e.client, ns, n)
	if err != nil {
		return r, err
	}
	defer o.Stop()
	var l *launched
	if contender == theirs {
		l, err = e.launchEnv(ctx, contender, o, upstreamCapacity.env, upstreamCapacity.args...)
	} else {
		l, err = e.launch(ctx, contender, o, capacityArgs...)
	}
	if err != nil {
		return r, err
	}
	defer e.lab.StopProvisioner()
	if err := e.waitCapacity(ctx); err != nil {
		return r, err
	}
	schedProc := e.cluster.Scheduler()
	if sched == "plugin" {
		schedProc = e.secondScheduler
	}
	schedCPU, _ := cpuMillis(schedProc.Pid())
	workBefore, workErr := e.schedulerWork(ctx, schedProc.Pid())
	start := time.Now()
	created, err := e.createPairs(ctx, ns, sched, n)
	if err != nil {
		return r, err
	}
	if err := o.waitUntil(ctx, e.runTimeout(), l.alive, func(_, _, bound, scheduled int) bool { return bound >= n && scheduled >= n }); err != nil {
		return r, err
	}
	schedEnd, _ := cpuMillis(schedProc.Pid())
	r.SchedulerCPUPerPod = (schedEnd - schedCPU) / float64(n)
	if workErr == nil {
		workAfter, err := e.schedulerWork(ctx, schedProc.Pid())
		workErr = err
		if err == nil {
			workAfter.perPod(&r, workBefore, n)
		}
	}
	if workErr != nil {
		klog.FromContext(ctx).Error(workErr, "Reading the scheduler's /metrics; its work per pod is not reported", "scheduler", sched)
	}
	e.finishCreate(ctx, &r, o, l, start, created)
	o.mu.Lock()
	first, last := span(o.scheduled)
	r.PerSecond = rate(len(o.scheduled), first, last)
	r.ToAllScheduled = last.Sub(start).Seconds()
	r.P50, r.P99 = latencies(created, o.scheduled, start)
	o.mu.Unlock()
	e.checkVolumes(ctx, &r, o, ns)
	return r, e.cleanUpPods(ctx, ns, o, l)
}

// waitCapacity waits until the provisioner has published a capacity object
// of the delayed class for every zone.
func (e *env) waitCapacity(ctx context.Context) error {
	want := len(zonesFor(e.size))
	return e.cluster.WaitFor(ctx, e.runTimeout(), func(ctx context.Context) (bool, error) {
		list, err := e.client.StorageV1().CSIStorageCapacities(lab.CapacityNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		n := 0
		for _, c := range list.Items {
			if c.StorageClassName == delayedClass && c.Capacity != nil {
				n++
			}
		}
		return n >= want, nil
	})
}

// createPairs creates n claims of the delayed class, each with a pod of the
// same name that uses it, scheduled by sched, and returns when each pod was
// created.
func (e *env) createPairs(ctx context.Context, ns, sched string, n int) (map[string]time.Time, error) {
	created := make([]time.Time, n)
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		c := claim(i, delayedClass)
		if _, err := e.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return err
		}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.Name}, Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}}},
		}}
		if sched == "plugin" {
			pod.Spec.SchedulerName = lab.SecondSchedulerName
		}
		if _, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		created[i] = time.Now()
		return nil
	})
	out := make(map[string]time.Time, n)
	for i, t := range created {
		out[claim(i, "").Name] = t
	}
	return out, err
}

// cleanUpPods deletes a wffc run's pods at once (no kubelet would finish a
// graceful deletion), then its claims and their volumes.
func (e *env) cleanUpPods(ctx context.Context, ns string, o *observer, l *launched) error {
	err := parallel(ctx, e.opts.Claims, 32, func(ctx context.Context, i int) error {
		err := e.client.CoreV1().Pods(ns).Delete(ctx, claim(i, "").Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return e.cleanUp(ctx, ns, o, l)
}
