package provisioner

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSelectionClock(t *testing.T) {
	now := time.Unix(100, 0)
	c := NewSelectionClock(func() time.Time { return now })
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{UID: "u1", Annotations: map[string]string{annSelectedNode: "n1"}}}
	c.Observe(claim)
	now = now.Add(2 * time.Second)
	c.Observe(claim) // a later event does not restart the clock
	if d, ok := c.Since("u1", "n1"); !ok || d != 2*time.Second {
		t.Errorf("Since(n1) = %v, %v; want 2s", d, ok)
	}
	if _, ok := c.Since("u1", "n2"); ok {
		t.Error("Since for another node reported a time")
	}
	claim.Annotations[annSelectedNode] = "n2" // rescheduled: a new clock
	c.Observe(claim)
	if d, ok := c.Since("u1", "n2"); !ok || d != 0 {
		t.Errorf("Since(n2) after reschedule = %v, %v; want 0", d, ok)
	}
	claim.Spec.VolumeName = "pv"
	c.Observe(claim)
	if c.Len() != 0 {
		t.Error("bound claim still timed")
	}
	claim.Spec.VolumeName = ""
	c.Observe(claim)
	c.Forget("u1")
	if c.Len() != 0 {
		t.Error("deleted claim still timed")
	}
}
