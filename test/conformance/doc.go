// Package conformance is the differential conformance harness: it runs
// upstream's external-provisioner v6.3.0 (built from the Go module proxy,
// controlplane.BuildUpstream) and our csi-provisioner side by side on one
// local control plane, each against a mock driver controller of its own
// (same flags, a driver name per side and profile), over the same corpus of
// cases, and diffs what they did.
//
// A case (corpus_test.go) is a small declarative value: a StorageClass, a
// claim, secrets, a data source, a VolumeAttributesClass, a pod for
// delayed binding, and optionally the claim's deletion. Each side runs it
// in a namespace of its own; the harness then records, normalised (claim
// UIDs, namespace, driver name, volume and snapshot IDs, the
// csiProvisionerIdentity value):
//
//   - every Controller call the driver received for the case, with its
//     whole request (capacity range, capabilities, parameters, mutable
//     parameters, secret keys without values, topology, content source),
//     from the mock driver's admin endpoint (/requests);
//   - the PV (annotations, labels, finalizers, spec, phase) and its Events;
//   - the claim (annotations, finalizers, phase) and the provisioner's
//     Events on it: per type and reason, the shapes of their messages
//     (normalised as above, every number as <n>);
//   - with --enable-capacity, the class's CSIStorageCapacity objects;
//   - after a deletion, whether the claim, the PV and the driver's volume
//     are gone.
//
// Every field that differs must match an entry of allowlist_test.go (case
// and field patterns, optionally the class's binding mode, and a reason);
// other differences fail the test with both values, and so does an entry
// that no longer matches. A WaitForFirstConsumer claim's placement (the
// selected node's segment first in preferred, the PV's node affinity) is
// never allowlisted: TestAllowlistKeepsDelayedPlacement. After the corpus,
// in every profile, every metric (name and label names) upstream serves
// must be served by ours, unless allowlisted. docs/migrating.md's section
// "Differences measured against upstream v6.3.0" is rendered from the
// allowlist (TestAllowlistDoc):
//
//	go test ./test/conformance -run TestAllowlistDoc -update
//
// RBAC: by default both sides run under upstream's unmodified
// deploy/kubernetes/rbac.yaml, as a vendor swapping the image would, plus
// one ClusterRole with what a vendor of upstream adds for the features the
// corpus uses: get and list on secrets, and get, list and watch on
// referencegrants (rules upstream's file carries commented out), and get
// on volumeattributesclasses (upstream GETs a
// claim's class and its file grants nothing on them; ours then reads them
// with GET too, its LIST probe being refused). With
// -conformance.deploy-rbac (CONFORMANCE_DEPLOY_RBAC=1) ours runs under
// deploy/'s RBAC with the same additions instead.
//
// Profiles (profiles_test.go): the flags both provisioners share
// (--extra-create-metadata, --feature-gates=Topology=true, no leader
// election) plus, per profile, a small declaration: its flags, environment
// and mock driver flags, and the cases of the corpus it runs again (named
// <case>@<profile>): --strict-topology and --immediate-topology=false (with
// the topology cases), --volume-name-prefix=k8s
// --volume-name-uuid-length=10, --default-fstype=ext4,
// --controller-publish-readonly, --enable-capacity (its objects compared),
// --leader-election, --node-deployment (NODE_NAME=node-z1, the mock serving
// node and controller), and xns. Every profile has its own pair of drivers
// and provisioners, all running at once. The nodes' CSINode objects carry
// an entry for every driver.
//
// Data sources in another namespace (crossns_test.go): kube-apiserver runs
// with --feature-gates=CrossNamespaceVolumeDataSource=true and serves the
// ReferenceGrant CRD (v1beta1); profile xns runs upstream with its gate
// (ours refuses it), with and without a ReferenceGrant.
//
// CSI migration (migration_test.go): both sides' driver is
// ebs.csi.aws.com, the migration target of the in-tree plugin
// kubernetes.io/aws-ebs, so that both translate the same way (two targets'
// translations differ in parameters, keys and volume IDs and would not be
// comparable). Two provisioners of one driver name would race for the same
// claims, so the migration cases run on ours first, then on upstream, each
// with a fresh mock controller (AWS zone names for its segments: the
// translation derives the region from them), and every claim and PV of a
// turn is gone before the next starts. The cases: in-tree classes
// (type/fsType/iopsPerGB/zone/zones parameters, allowedTopologies with the
// well-known zone label, both at once, delayed binding, block), a class of
// the driver itself, and a PV the in-tree plugin made, which
// kube-controller-manager marks pv.kubernetes.io/migrated-to, released and
// deleted through the driver.
//
// After a deletion the deleted.* fields record only the driver calls made
// since the first observation (DeleteVolume with or without secrets), and
// a case with a VolumeAttachment records detached.* after the attachment
// goes.
//
// make test runs the package (go test ./...); make conformance runs it
// verbosely, printing each case's observation, and CONFORMANCE_REPEAT=n (or
// -conformance.repeat=n) runs every case n times.
package conformance
