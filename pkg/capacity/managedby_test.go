package capacity

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ManagedBy gives external-provisioner's values (its central one, and
// external-provisioner-<node> shortened as it shortens it), so that either
// sidecar adopts the other's capacity objects.
func TestManagedBy(t *testing.T) {
	tests := []struct{ node, want string }{
		{"", "external-provisioner"},
		{"node-a", "external-provisioner-node-a"},
		{strings.Repeat("n", 42), "external-provisioner-" + strings.Repeat("n", 42)},
		{strings.Repeat("n", 43), "external-p-53f40b57-" + strings.Repeat("n", 43)},
		{strings.Repeat("n", 52), "e-53f40b57-" + strings.Repeat("n", 52)},
		{strings.Repeat("n", 53), "external-provisioner-698d23b8"},
		{strings.Repeat("n", 200), "external-provisioner-0dd8251e"},
	}
	for _, tt := range tests {
		got := ManagedBy(tt.node)
		if got != tt.want {
			t.Errorf("ManagedBy(%d characters) = %q, want %q", len(tt.node), got, tt.want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("ManagedBy(%d characters) = %q: %v", len(tt.node), got, errs)
		}
	}
}
