package explain

import (
	"bytes"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// TestNamespaceGroupsByCause checks that the summary groups the claims that
// are not bound by cause, skips bound ones, and lists the nodes once for
// all claims of the driver.
func TestNamespaceGroupsByCause(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	named := func(c *v1.PersistentVolumeClaim, name, class string) *v1.PersistentVolumeClaim {
		c.Name, c.UID, c.Spec.StorageClassName = name, types.UID("uid-"+name), ptr.To(class)
		return c
	}
	bound := named(claim(""), "done", "fast")
	bound.Status.Phase, bound.Spec.VolumeName = v1.ClaimBound, "pv-done"
	objs := cluster(class("fast"), class("narrow", "z9"),
		named(claim("n3"), "on-bare", "fast"), named(claim(""), "narrow-a", "narrow"), named(claim(""), "narrow-b", "narrow"), bound)
	client := fake.NewClientset(objs...)
	sum, err := Namespace(ctx, client, "ns", Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteSummary(&out, sum); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	want := []string{
		"namespace ns: 3 of 4 claim(s) not bound",
		"  NoAllowedSegment (2): narrow-a, narrow-b",
		"  NoDriverOnNode (1): on-bare",
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("no %q in the summary:\n%s", w, out.String())
		}
	}
	lists := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("nodes listed %d times for 3 claims of one driver, want once", lists)
	}
}
