package conformance

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

const csiPrefix = "csi.storage.k8s.io/"

// secretKinds are the per-kind secret keys of a StorageClass
// (csi.storage.k8s.io/<kind>-secret-name and -namespace).
var secretKinds = []string{"provisioner", "controller-publish", "node-stage", "node-publish", "controller-expand", "node-expand", "controller-modify"}

// deprecatedSecretKinds are the pre-1.0 keys (csi<Kind>SecretName and
// csi<Kind>SecretNamespace) upstream still reads.
var deprecatedSecretKinds = []string{"Provisioner", "ControllerPublish", "NodeStage", "NodePublish"}

var (
	rwo  = v1.ReadWriteOnce
	rox  = v1.ReadOnlyMany
	rwx  = v1.ReadWriteMany
	rwop = v1.ReadWriteOncePod
)

// corpus returns every case; names are unique.
func corpus() []tcase {
	var cs []tcase
	cs = append(cs, secretCases()...)
	cs = append(cs, parameterCases()...)
	cs = append(cs, modeCases()...)
	cs = append(cs, sourceCases()...)
	cs = append(cs, crossNamespaceCases()...)
	cs = append(cs, topologyCases()...)
	cs = append(cs, deletionCases()...)
	cs = append(cs, migrationCases()...)
	return append(cs, profileCases(cs)...)
}

// secretCases: every kind's keys with a literal name, with templates, with
// an annotation template, and with a name but no namespace; the deprecated
// keys; the default keys and their fallback.
func secretCases() []tcase {
	var cs []tcase
	for _, kind := range secretKinds {
		name, ns := csiPrefix+kind+"-secret-name", csiPrefix+kind+"-secret-namespace"
		lit := tcase{name: "secret/" + kind + "/literal", secrets: []string{"sec"}, want: wantBound,
			class: classSpec{params: map[string]string{name: "sec", ns: "{ns}"}}}
		if kind == "provisioner" {
			lit.del = &deleteSpec{}
		}
		cs = append(cs, lit,
			tcase{name: "secret/" + kind + "/template-claim", secrets: []string{"data"}, want: wantBound,
				class: classSpec{params: map[string]string{name: "${pvc.name}", ns: "${pvc.namespace}"}}},
			tcase{name: "secret/" + kind + "/template-annotation", secrets: []string{"annotated"}, want: wantBound,
				claim: claimSpec{annotations: map[string]string{"team.example.com/secret": "annotated"}},
				class: classSpec{params: map[string]string{name: "${pvc.annotations['team.example.com/secret']}", ns: "${pvc.namespace}"}}},
			pvNameTemplate(kind, name, ns),
			tcase{name: "secret/" + kind + "/name-without-namespace", secrets: []string{"sec"}, want: wantFailed,
				class: classSpec{params: map[string]string{name: "sec"}}},
		)
	}
	for _, kind := range deprecatedSecretKinds {
		cs = append(cs, tcase{name: "secret/deprecated-" + kind, secrets: []string{"sec"}, want: wantBound,
			class: classSpec{params: map[string]string{"csi" + kind + "SecretName": "sec", "csi" + kind + "SecretNamespace": "{ns}"}}})
	}
	return append(cs,
		tcase{name: "secret/deprecated-and-new", secrets: []string{"sec"}, want: wantFailed,
			class: classSpec{params: map[string]string{"csiProvisionerSecretName": "sec", "csiProvisionerSecretNamespace": "{ns}",
				csiPrefix + "provisioner-secret-name": "sec", csiPrefix + "provisioner-secret-namespace": "{ns}"}}},
		tcase{name: "secret/default-keys", secrets: []string{"sec"}, want: wantBound, del: &deleteSpec{},
			class: classSpec{params: map[string]string{csiPrefix + "secret-name": "sec", csiPrefix + "secret-namespace": "{ns}"}}},
		tcase{name: "secret/default-and-per-kind", secrets: []string{"sec", "prov"}, want: wantBound, del: &deleteSpec{},
			class: classSpec{params: map[string]string{csiPrefix + "secret-name": "sec", csiPrefix + "secret-namespace": "{ns}",
				csiPrefix + "provisioner-secret-name": "prov", csiPrefix + "provisioner-secret-namespace": "{ns}"}}},
		tcase{name: "secret/provisioner-missing", want: wantFailed,
			class: classSpec{params: map[string]string{csiPrefix + "provisioner-secret-name": "nope", csiPrefix + "provisioner-secret-namespace": "{ns}"}}},
		tcase{name: "secret/bad-template", secrets: []string{"sec"}, want: wantFailed,
			class: classSpec{params: map[string]string{csiPrefix + "provisioner-secret-name": "${pvc.uid}", csiPrefix + "provisioner-secret-namespace": "{ns}"}}},
		tcase{name: "secret/node-publish-missing", want: wantBound,
			class: classSpec{params: map[string]string{csiPrefix + "node-publish-secret-name": "nope", csiPrefix + "node-publish-secret-namespace": "{ns}"}}},
	)
}

// pvNameTemplate is the case of a secret whose namespace is the PV's name:
// the claim is Bound, except for the provisioner secret, read before the
// PV exists, in a namespace that does not exist.
func pvNameTemplate(kind, name, ns string) tcase {
	tc := tcase{name: "secret/" + kind + "/template-pv-name", secrets: []string{"sec"}, want: wantBound,
		class: classSpec{params: map[string]string{name: "sec", ns: "${pv.name}"}}}
	if kind == "provisioner" {
		tc.want = wantFailed
	}
	return tc
}

// parameterCases: fstype in every spelling, unknown reserved keys, plain
// parameters (templates are not expanded in them), mount options, sizes.
func parameterCases() []tcase {
	cs := []tcase{
		{name: "fstype/prefixed", class: classSpec{params: map[string]string{csiPrefix + "fstype": "xfs"}}},
		{name: "fstype/lowercase", class: classSpec{params: map[string]string{"fstype": "xfs"}}},
		{name: "fstype/FsType", class: classSpec{params: map[string]string{"FsType": "xfs"}}},
		{name: "fstype/none", class: classSpec{}},
		{name: "fstype/both", want: wantFailed, class: classSpec{params: map[string]string{csiPrefix + "fstype": "xfs", "fstype": "ext4"}}},
		{name: "fstype/block", claim: claimSpec{block: true}, class: classSpec{params: map[string]string{csiPrefix + "fstype": "xfs"}}},
		{name: "params/unknown-reserved-key", want: wantFailed, class: classSpec{params: map[string]string{csiPrefix + "colour": "red"}}},
		{name: "params/plain", class: classSpec{params: map[string]string{"type": "fast", "replicas": "3"}}},
		{name: "params/templates-not-expanded", class: classSpec{params: map[string]string{"path": "${pvc.namespace}/${pvc.name}"}}},
		{name: "params/extra-metadata-keys-in-class", want: wantFailed, class: classSpec{params: map[string]string{csiPrefix + "pvc/name": "x"}}},
		{name: "mount/options", class: classSpec{mountOptions: []string{"noatime", "nodiratime"}}},
		{name: "mount/options-block", claim: claimSpec{block: true}, class: classSpec{mountOptions: []string{"noatime"}}},
		{name: "size/request", claim: claimSpec{request: "3Gi"}},
		{name: "size/unaligned", claim: claimSpec{request: "1500M"}},
		{name: "size/limit", claim: claimSpec{request: "1Gi", limit: "2Gi"}},
		{name: "size/request-equals-limit", claim: claimSpec{request: "2Gi", limit: "2Gi"}},
		{name: "size/too-large", want: wantFailed, claim: claimSpec{request: "100Ti"}},
		{name: "vac/exists", vac: map[string]string{"iops": "3000"}, claim: claimSpec{vac: "vac"}, del: &deleteSpec{}},
		{name: "vac/missing", want: wantFailed, claim: claimSpec{vac: "no-such-vac"}},
		{name: "vac/invalid-parameter", want: wantFailed, vac: map[string]string{"colour": "red"}, claim: claimSpec{vac: "vac"}},
	}
	for i := range cs {
		if cs[i].want == "" {
			cs[i].want = wantBound
		}
	}
	return cs
}

// modeCases: volume mode x access modes.
func modeCases() []tcase {
	var cs []tcase
	for _, block := range []bool{false, true} {
		for _, modes := range [][]v1.PersistentVolumeAccessMode{{rwo}, {rox}, {rwx}, {rwop}, {rwo, rox}, {rwo, rwx, rox}} {
			mode := "filesystem"
			if block {
				mode = "block"
			}
			cs = append(cs, tcase{name: fmt.Sprintf("mode/%s/%v", mode, modes), want: wantBound,
				claim: claimSpec{block: block, accessModes: modes}})
		}
	}
	return cs
}

// sourceCases: clone and restore through dataSource and dataSourceRef, a
// populator's kind, missing sources, a delayed restore whose pod is in
// another zone than the snapshot's volume (crossns_test.go: another
// namespace).
func sourceCases() []tcase {
	widget := &v1.TypedObjectReference{APIGroup: ptr.To("example.com"), Kind: "Widget", Name: "w"}
	missingPVC := &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "nope"}
	missingSnap := &v1.TypedObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "nope"}
	return []tcase{
		{name: "source/clone", want: wantBound, claim: claimSpec{source: sourceClone}, del: &deleteSpec{}},
		{name: "source/clone-ref", want: wantBound, claim: claimSpec{source: sourceClone, useRef: true}},
		{name: "source/clone-block", want: wantBound, claim: claimSpec{source: sourceClone, block: true}},
		{name: "source/clone-larger", want: wantBound, claim: claimSpec{source: sourceClone, request: "2Gi"}},
		{name: "source/snapshot", want: wantBound, claim: claimSpec{source: sourceSnapshot}, del: &deleteSpec{}},
		{name: "source/snapshot-ref", want: wantBound, claim: claimSpec{source: sourceSnapshot, useRef: true}},
		{name: "source/populator", want: wantIgnored, claim: claimSpec{ref: widget}},
		{name: "source/missing-claim", want: wantFailed, claim: claimSpec{ref: missingPVC}},
		{name: "source/missing-snapshot", want: wantFailed, claim: claimSpec{ref: missingSnap}},
		{name: "source/clone-wffc", want: wantBound, podZone: "z1", class: classSpec{wffc: true}, claim: claimSpec{source: sourceClone}},
		// The source is in z1, the restore's pod in z2: both make the
		// volume in z2 (the mock's snapshots are regional; upstream
		// restores anywhere).
		{name: "source/snapshot-wffc-other-zone", want: wantBound, podZone: "z2", class: classSpec{wffc: true}, claim: claimSpec{source: sourceSnapshot}},
	}
}

// topologyCases: immediate and delayed binding, allowedTopologies, in each
// profile (--strict-topology, --immediate-topology=false).
func topologyCases() []tcase {
	var cs []tcase
	for _, p := range []profile{profileDefault, profileStrict, profileNoImmediate} {
		cs = append(cs,
			tcase{name: "topology/" + string(p) + "/immediate", profile: p, want: wantBound},
			tcase{name: "topology/" + string(p) + "/immediate-allowed", profile: p, want: wantBound,
				class: classSpec{allowedZones: []string{"z2", "z3"}}},
			// No node in the allowed zone (a node group scaled to zero):
			// the terms go as written; the mock has no such zone.
			tcase{name: "topology/" + string(p) + "/immediate-allowed-no-node", profile: p, want: wantFailed,
				class: classSpec{allowedZones: []string{"z9"}}},
			tcase{name: "topology/" + string(p) + "/wffc", profile: p, want: wantBound, podZone: "z2", del: &deleteSpec{},
				class: classSpec{wffc: true}},
			tcase{name: "topology/" + string(p) + "/wffc-allowed", profile: p, want: wantBound, podZone: "z3",
				class: classSpec{wffc: true, allowedZones: []string{"z1", "z3"}}},
		)
	}
	return cs
}

// deletionCases: reclaim policies; the deletion secret named by the PV's
// annotations or (without them) by its class, present or gone, or taken
// from the PV's annotations after the class went; a volume still attached;
// a static PV no provisioner made.
func deletionCases() []tcase {
	prov := map[string]string{csiPrefix + "provisioner-secret-name": "sec", csiPrefix + "provisioner-secret-namespace": "{ns}"}
	return []tcase{
		{name: "delete/reclaim-delete", want: wantBound, del: &deleteSpec{}},
		{name: "delete/reclaim-retain", want: wantBound, del: &deleteSpec{}, class: classSpec{reclaim: v1.PersistentVolumeReclaimRetain}},
		{name: "delete/secret-present", want: wantBound, secrets: []string{"sec"}, class: classSpec{params: prov}, del: &deleteSpec{}},
		{name: "delete/secret-missing", want: wantBound, secrets: []string{"sec"}, class: classSpec{params: prov}, del: &deleteSpec{secrets: true}},
		{name: "delete/class-secret-present", want: wantBound, secrets: []string{"sec"}, class: classSpec{params: prov},
			del: &deleteSpec{stripSecretAnnotations: true}},
		{name: "delete/class-secret-missing", want: wantBound, secrets: []string{"sec"}, class: classSpec{params: prov},
			del: &deleteSpec{stripSecretAnnotations: true, secrets: true}},
		{name: "delete/attached", want: wantBound, del: &deleteSpec{attached: true}},
		{name: "delete/class-gone", want: wantBound, secrets: []string{"sec"}, class: classSpec{params: prov}, del: &deleteSpec{class: true}},
		{name: "delete/class-gone-template", want: wantBound, secrets: []string{"data"}, del: &deleteSpec{class: true},
			class: classSpec{params: map[string]string{csiPrefix + "provisioner-secret-name": "${pvc.name}", csiPrefix + "provisioner-secret-namespace": "${pvc.namespace}"}}},
		{name: "delete/static-not-ours", want: wantBound, static: true, del: &deleteSpec{}},
		{name: "delete/block", want: wantBound, claim: claimSpec{block: true}, del: &deleteSpec{}},
	}
}
