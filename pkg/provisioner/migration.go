package provisioner

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	csitrans "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

// annMigratedTo is the annotation kube-controller-manager's PV controller
// writes on claims and PVs of an in-tree plugin: the CSI driver that now
// handles them.
const annMigratedTo = "pv.kubernetes.io/migrated-to"

// Annotations kube-controller-manager's PV controller puts on a claim it
// leaves to an external provisioner (the beta one for older clusters).
const (
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
)

// InTreePluginName returns the in-tree volume plugin whose volumes driver
// takes over under CSI migration (e.g. kubernetes.io/aws-ebs for
// ebs.csi.aws.com), as k8s.io/csi-translation-lib knows them; "" when
// driver is not a migration target.
func InTreePluginName(driver string) string {
	t := csitrans.New()
	if !t.IsMigratedCSIDriverByName(driver) {
		return ""
	}
	name, err := t.GetInTreeNameFromCSIName(driver)
	if err != nil {
		return ""
	}
	return name
}

// migration translates the StorageClasses and PVs of one in-tree plugin
// for the CSI driver that replaces it, as upstream external-provisioner
// does: classes naming the plugin are provisioned by the driver (the class
// translated to CSI), their PVs are written with the plugin's volume
// source, and PVs of the plugin marked as migrated to the driver are
// deleted through it. A nil *migration (a driver that replaces no plugin)
// serves nothing.
type migration struct {
	driver, inTree string
	translator     csitrans.CSITranslator
}

// newMigration returns the migration of the plugin driver replaces, nil
// when it replaces none.
func newMigration(driver string) *migration {
	inTree := InTreePluginName(driver)
	if inTree == "" {
		return nil
	}
	return &migration{driver: driver, inTree: inTree, translator: csitrans.New()}
}

// libraryOptions are the library's options for the migration: claims of
// the in-tree plugin's classes and its PVs (those marked as migrated to the
// driver: the library hands over PVs whose provisioned-by or migrated-to
// annotation names one of its provisioner names) are the library's too.
// None without a migration.
func (m *migration) libraryOptions(logger klog.Logger) []func(*controller.ProvisionController) error {
	if m == nil {
		return nil
	}
	logger.V(2).Info("Serving the in-tree plugin the driver replaces (CSI migration)", "plugin", m.inTree)
	return []func(*controller.ProvisionController) error{controller.AdditionalProvisionerNames([]string{m.inTree})}
}

// servesClass reports whether class names the in-tree plugin.
func (m *migration) servesClass(class *storagev1.StorageClass) bool {
	return m != nil && class != nil && class.Provisioner == m.inTree
}

// translateClass returns a copy of an in-tree class with the driver's
// parameters and topology keys (class is not changed).
func (m *migration) translateClass(logger klog.Logger, class *storagev1.StorageClass) (*storagev1.StorageClass, error) {
	out, err := m.translator.TranslateInTreeStorageClassToCSI(logger, m.inTree, class)
	if err != nil {
		return nil, fmt.Errorf("translating StorageClass %q of in-tree plugin %s to CSI: %w", class.Name, m.inTree, err)
	}
	return out, nil
}

// toInTree returns the in-tree form of a PV the driver provisioned for an
// in-tree class (pv is not changed).
func (m *migration) toInTree(pv *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	out, err := m.translator.TranslateCSIPVToInTree(pv)
	if err != nil {
		return nil, fmt.Errorf("translating PV %q to in-tree plugin %s: %w", pv.Name, m.inTree, err)
	}
	return out, nil
}

// migratedPV reports whether pv is a volume of the in-tree plugin that
// kube-controller-manager marked as migrated to the driver: only those
// are deleted through the driver (see toCSI).
func (m *migration) migratedPV(pv *v1.PersistentVolume) bool {
	if m == nil || pv.Spec.CSI != nil || pv.Annotations[annMigratedTo] != m.driver || !m.translator.IsPVMigratable(pv) {
		return false
	}
	name, err := m.translator.GetInTreePluginNameFromSpec(pv, nil)
	return err == nil && name == m.inTree
}

// toCSI returns the CSI form of a migrated in-tree PV (pv is not changed).
func (m *migration) toCSI(logger klog.Logger, pv *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	out, err := m.translator.TranslateInTreePVToCSI(logger, pv)
	if err != nil {
		return nil, fmt.Errorf("translating in-tree PV %q to CSI: %w", pv.Name, err)
	}
	return out, nil
}

// claimFor reports whether a claim is for this driver as upstream decides
// it: its storage-provisioner annotation (or the beta one) names the
// driver, or kube-controller-manager marked it as migrated to the driver.
// A claim of the in-tree plugin that is not migrated is left to the
// plugin.
func claimFor(driver string, claim *v1.PersistentVolumeClaim) bool {
	provisioner, ok := claim.Annotations[annStorageProvisioner]
	if !ok {
		provisioner = claim.Annotations[annBetaStorageProvisioner]
	}
	return provisioner == driver || claim.Annotations[annMigratedTo] == driver
}
