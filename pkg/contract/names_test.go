package contract

import "testing"

// TestLeaderLeaseName checks upstream external-provisioner's rule
// (csi-lib-utils leaderelection: every character but [a-zA-Z0-9-] becomes
// '-', and a name ending in '-' gets an 'X').
func TestLeaderLeaseName(t *testing.T) {
	for _, tc := range []struct{ name, driver, want string }{
		{name: "dots", driver: "mock.csi.example.com", want: "mock-csi-example-com"},
		{name: "dashes and capitals kept", driver: "Vendor-CSI.example.com", want: "Vendor-CSI-example-com"},
		{name: "slash", driver: "example.com/driver", want: "example-com-driver"},
		{name: "trailing non-alphanumeric gets X", driver: "csi_driver.", want: "csi-driver-X"},
		{name: "trailing dash gets X", driver: "driver-", want: "driver-X"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LeaderLeaseName(tc.driver); got != tc.want {
				t.Errorf("LeaderLeaseName(%q) = %q, want %q", tc.driver, got, tc.want)
			}
		})
	}
}
