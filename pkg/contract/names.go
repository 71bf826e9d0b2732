package contract

import "strings"

// InFlightRecordFinalizer is the provisioner's in-flight record on a claim:
// added before every CreateVolume and removed once the claim's PV exists
// (docs/operations.md, "The in-flight record").
const InFlightRecordFinalizer = "provisioner.storage.kubernetes.io/volume-leak-protection"

// InFlightEventComponent is the Event source of the provisioner's in-flight
// record keeper, which posts InFlightVolumeDeleted and
// InFlightVolumeAbandoned on claims.
const InFlightEventComponent = "csi-provisioner"

// Labels of the CSIStorageCapacity objects the provisioner publishes,
// upstream external-provisioner's, so that either sidecar adopts the
// other's objects.
const (
	// LabelCapacityDriver is the CSI driver's name.
	LabelCapacityDriver = "csi.storage.k8s.io/drivername"
	// LabelCapacityManagedBy names the publisher: CapacityManagedBy for the
	// central provisioner, CapacityManagedBy + "-<node>" for a node
	// deployment's instance (shortened with a hash when too long).
	LabelCapacityManagedBy = "csi.storage.k8s.io/managed-by"
	// CapacityManagedBy is the LabelCapacityManagedBy value of the central
	// provisioner's objects.
	CapacityManagedBy = "external-provisioner"
)

// LeaderLeaseName returns the name of the provisioner's leader-election
// Lease for a driver, by upstream external-provisioner's rule (v6.3.0 with
// csi-lib-utils' leaderelection), so that replicas of either image elect
// one leader between them: the driver name with every character that is
// not a letter, a digit or '-' replaced by '-', and an 'X' appended when it
// would end in '-'. "mock.csi.example.com" gives "mock-csi-example-com",
// "odd.driver_" gives "odd-driver-X".
func LeaderLeaseName(driver string) string {
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, driver)
	if strings.HasSuffix(name, "-") {
		name += "X"
	}
	return name
}
