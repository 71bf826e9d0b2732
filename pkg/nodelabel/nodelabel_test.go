package nodelabel

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestValue(t *testing.T) {
	long := strings.Repeat("n", 64)
	for _, tc := range []struct {
		name, node, driver, want string
	}{
		{name: "short node name as is", node: "node-1", want: "node-1"},
		{name: "63 characters as is", node: strings.Repeat("a", 63), want: strings.Repeat("a", 63)},
		{name: "longer node name hashed", node: long, want: "h_" + hashHex(long, 40)},
		{name: "dotted node name as is", node: "ip-10-0-0-1.ec2.internal", want: "ip-10-0-0-1.ec2.internal"},
		{name: "pool of a driver", driver: "lvm.csi.example.com", want: "unselected_" + hashHex("lvm.csi.example.com", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Value(tc.node, tc.driver)
			if got != tc.want {
				t.Errorf("Value(%q, %q) = %q, want %q", tc.node, tc.driver, got, tc.want)
			}
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Errorf("Value(%q, %q) = %q is not a label value: %v", tc.node, tc.driver, got, errs)
			}
			if IsPool(got) != (tc.node == "") {
				t.Errorf("IsPool(%q) = %t", got, IsPool(got))
			}
		})
	}
	if NodeValue("node-1") != "node-1" || PoolValue("d") != Value("", "d") {
		t.Errorf("NodeValue and PoolValue differ from Value")
	}
	if PoolValue("a") == PoolValue("b") || NodeValue(long) == NodeValue(long+"x") {
		t.Errorf("different names share a value")
	}
}
