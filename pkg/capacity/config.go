package capacity

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelselection "k8s.io/apimachinery/pkg/selection"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// Labels on the CSIStorageCapacity objects this publisher owns.
const (
	labelDriverName = contract.LabelCapacityDriver
	labelManagedBy  = contract.LabelCapacityManagedBy
)

// reservedParameterPrefix starts the StorageClass parameter keys that are
// the provisioner's and never reach the driver.
const reservedParameterPrefix = "csi.storage.k8s.io/"

// Config configures capacity publishing.
type Config struct {
	// DriverName is the CSI driver.
	DriverName string
	// Namespace holds the CSIStorageCapacity objects.
	Namespace string
	// PollInterval refreshes every object; default 1m.
	PollInterval time.Duration
	// Owner, when set, becomes the objects' owner (the provisioner's
	// Deployment), so they go away with it.
	Owner *metav1.OwnerReference
	// Timeout bounds each GetCapacity call; default 10s.
	Timeout time.Duration
	// ManagedBy is the csi.storage.k8s.io/managed-by label of the objects
	// this publisher owns. Default ManagedBy(""), external-provisioner's
	// value, so that each of the two sidecars adopts the other's objects; a
	// node deployment's instance has its own (ManagedBy(node)).
	ManagedBy string
	// PreviousManagedBy lists other managed-by values whose objects this
	// publisher adopts (relabels with ManagedBy and updates in place, or
	// deletes when obsolete or duplicate): those earlier releases gave
	// their objects (LegacyManagedBy). Default, with ManagedBy unset too:
	// LegacyManagedBy("").
	PreviousManagedBy []string
	// DriverParameters returns the parameters of a class that GetCapacity
	// passes to the driver, the ones CreateVolume passes, or an error for
	// a class whose parameters are refused (its objects are then neither
	// created nor refreshed, and the sync reports the error). Default: the
	// class's parameters without the reserved csi.storage.k8s.io/ keys.
	// The provisioner sets its own parser, which also refuses unknown
	// reserved keys.
	DriverParameters func(classParameters map[string]string) (map[string]string, error)
}

func (c Config) withDefaults() Config {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ManagedBy == "" {
		c.ManagedBy = ManagedBy("")
		if c.PreviousManagedBy == nil {
			c.PreviousManagedBy = []string{LegacyManagedBy("")}
		}
	}
	if c.DriverParameters == nil {
		c.DriverParameters = unreservedParameters
	}
	return c
}

// unreservedParameters is the default Config.DriverParameters: every key
// without the reserved prefix.
func unreservedParameters(params map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(params))
	for k, v := range params {
		if !strings.HasPrefix(k, reservedParameterPrefix) {
			out[k] = v
		}
	}
	return out, nil
}

// Selector selects the CSIStorageCapacity objects a publisher of c owns or
// adopts (c with its defaults): the driver's, managed by ManagedBy or one
// of PreviousManagedBy. An informer of the publisher's objects lists with
// it.
func (c Config) Selector() labels.Selector {
	return c.withDefaults().selector()
}

// selector is Selector of a Config with its defaults.
func (c Config) selector() labels.Selector {
	driver, err := labels.NewRequirement(labelDriverName, labelselection.Equals, []string{c.DriverName})
	if err != nil {
		// Only an invalid driver name gets here, which the driver's
		// registration has refused already: select nothing.
		return labels.Nothing()
	}
	managedBy, err := labels.NewRequirement(labelManagedBy, labelselection.In, append([]string{c.ManagedBy}, c.PreviousManagedBy...))
	if err != nil {
		return labels.Nothing()
	}
	return labels.NewSelector().Add(*driver, *managedBy)
}
