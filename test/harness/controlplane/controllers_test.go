package controlplane

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
)

// TestControllers checks the controllers of a real cluster that the tests
// rely upon: a deleted namespace with a claim in it goes away (namespace
// controller; the claim's protection finalizer is released as no pod uses
// it), and an object whose owner is deleted is deleted too (garbage
// collector).
func TestControllers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	_, ctx := ktesting.NewTestContext(t)
	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.DumpLogs(os.Stderr, 40)
		}
		_ = c.Stop()
	})
	client := c.Client

	t.Run("namespace with a claim", func(t *testing.T) {
		ns, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		none := ""
		pvc := &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: v1.PersistentVolumeClaimSpec{
				AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				StorageClassName: &none,
				Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := client.CoreV1().PersistentVolumeClaims(ns.Name).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			got, _ := client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			t.Fatalf("namespace %s still there: %v (status %+v)", ns.Name, err, got.Status)
		}
	})

	t.Run("owner deleted", func(t *testing.T) {
		cms := client.CoreV1().ConfigMaps("default")
		owner, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
		if _, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{ref}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := cms.Get(ctx, "dependent", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("the dependent ConfigMap is still there: %v", err)
		}
	})
}

// beforeNamespaceController are the controllers the control plane ran
// before it ran DefaultControllers, for BenchmarkStart.
var beforeNamespaceController = []string{
	"persistentvolume-binder-controller", "persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller", "serviceaccount-controller", "statefulset-controller",
}

// BenchmarkStart measures what the controllers cost: the time from Start to
// a ready control plane (binaries cached) and the CPU time
// kube-controller-manager uses in its first 30 s.
//
//	go test ./test/controlplane -run '^$' -bench Start -benchtime 2x
func BenchmarkStart(b *testing.B) {
	for _, bc := range []struct {
		name        string
		controllers []string
	}{
		{name: "before", controllers: beforeNamespaceController},
		{name: "default", controllers: DefaultControllers},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, ctx := ktesting.NewTestContext(b)
			if _, err := BuildControlPlane(ctx, mustRepoRoot(b)); err != nil {
				b.Fatal(err)
			}
			var ready, cpu time.Duration
			for b.Loop() {
				start := time.Now()
				c, err := Start(ctx, Options{Controllers: bc.controllers})
				if err != nil {
					b.Fatal(err)
				}
				ready += time.Since(start)
				used, err := controllerManagerCPU(c, 30*time.Second)
				_ = c.Stop()
				if err != nil {
					b.Fatal(err)
				}
				cpu += used
			}
			b.ReportMetric(ready.Seconds()/float64(b.N), "s-to-ready")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "kcm-cpu-s/30s")
		})
	}
}

func mustRepoRoot(b *testing.B) string {
	root, err := RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	return root
}

// controllerManagerCPU waits until kube-controller-manager has run for
// window and returns the CPU time (user + system) it used.
func controllerManagerCPU(c *Cluster, window time.Duration) (time.Duration, error) {
	var pid int
	for _, p := range c.core {
		if p.Name == "kube-controller-manager" {
			pid = p.Pid()
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	uptime, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	// Fields after "pid (comm)": state is 0, utime 11, stime 12, starttime 19,
	// in clock ticks (USER_HZ, 100 on Linux).
	const tick = 10 * time.Millisecond
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	started, _ := strconv.ParseFloat(fields[19], 64)
	up, _ := strconv.ParseFloat(strings.Fields(string(uptime))[0], 64)
	age := time.Duration(up*float64(time.Second)) - time.Duration(started)*tick
	<-time.After(window - age) // a measurement window, not a synchronisation
	if stat, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil {
		return 0, err
	}
	fields = strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	return time.Duration(utime+stime) * tick, nil
}
