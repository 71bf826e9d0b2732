package explain

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// BenchmarkClaim5000Nodes explains a claim on a cluster of 5 000 nodes in
// 50 zones, all with the driver (reads from a fake clientset: the cost of
// the explanation itself, paging included, without the network). Its pod may
// go anywhere, so the filter runs on every node.
func BenchmarkClaim5000Nodes(b *testing.B) {
	objs := []runtime.Object{leader(time.Second), class("fast"), claim("")}
	for i := range 5000 {
		name := fmt.Sprintf("n%04d", i)
		objs = append(objs, node(name, fmt.Sprintf("z%d", i%50)), csiNode(name, true))
	}
	pod := &v1.Pod{}
	pod.Namespace, pod.Name = "ns", "data"
	pod.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	objs = append(objs, pod)
	client := fake.NewClientset(objs...)
	_, ctx := ktesting.NewTestContext(b)
	b.ResetTimer()
	for b.Loop() {
		r, err := Claim(ctx, client, "ns", "data", Options{Now: now})
		if err != nil {
			b.Fatal(err)
		}
		if r.Cause != CauseWaitingForScheduler {
			b.Fatalf("cause %s: %s", r.Cause, r.Conclusion)
		}
	}
}
