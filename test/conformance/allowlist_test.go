package conformance

// recordAfterFailure is the reason a claim whose CreateVolume failed
// carries the in-flight record here and nothing upstream.
const recordAfterFailure = "a claim whose CreateVolume failed keeps the in-flight record while csi-provisioner runs (docs/operations.md \"The in-flight record\"): removing it would change the claim, whose update queues an attempt at once, past the library's backoff. It goes when the claim is handed back to the scheduler, gets a PV, or, once deleted, its volume is known gone, and when csi-provisioner stops (SIGTERM), since the driver's answer said that no volume of the name exists; upstream has no record and leaks volumes made before a failure"

// allowlist lists every known difference between csi-provisioner and
// upstream's external-provisioner v6.3.0 that test/conformance measures,
// with the reason a vendor would accept it (docs/migrating.md renders it).
var allowlist = []allowed{
	{Case: "*", Field: "*claim.events[Normal Provisioning]",
		Reason: "one Event per volume: the library's `Provisioning` Event is dropped, `ProvisioningSucceeded` or `ProvisioningFailed` says what happened (Behaviours that differ)"},
	{Case: "size/too-large", Field: "claim.finalizers[provisioner.storage.kubernetes.io/volume-leak-protection]",
		Reason: recordAfterFailure},
	{Case: "vac/invalid-parameter", Field: "claim.finalizers[provisioner.storage.kubernetes.io/volume-leak-protection]",
		Reason: recordAfterFailure},
	{Case: "topology/*/immediate-allowed-no-node", Field: "claim.finalizers[provisioner.storage.kubernetes.io/volume-leak-protection]",
		Reason: recordAfterFailure},
	{Case: "*", Field: "*calls.CreateVolume[*].accessibilityRequirements.preferred[*]*",
		Reason: "with Immediate binding both ask for every segment, in another order: upstream orders preferred by a hash of the claim's name, ours rotates the list (Behaviours that differ, Topology requirements)"},
	{Case: "*", Field: "*pv.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]",
		Reason: "the mock driver places an Immediate volume in the first preferred segment, which differs (see the preferred order): the PV's node affinity names that segment"},
	{Case: "*", Field: "*pv.spec.csi.volumeAttributes[mock.csi.example.com/segment]",
		Reason: "the mock driver's volume context names the segment it chose, which follows the preferred order"},
	{Case: "migration/*", Field: "*pv.labels[topology.kubernetes.io/zone]",
		Reason: "a migrated PV's zone label, translated from the segment the mock driver chose, follows the preferred order too"},
	{Case: "source/clone*", Field: "*calls.CreateVolume[*].accessibilityRequirements.requisite[*]*",
		Reason: "a clone is asked for only in the segments where its source volume is reachable; restores are not narrowed, unless their snapshot's volume is node-bound (docs/data-sources.md)"},
	{Case: metricsCase, Field: "aggregator_discovery_*",
		Reason: "registered by k8s.io/apiserver, which upstream links but never runs (a sidecar serves no API); always zero"},
	{Case: metricsCase, Field: "apiserver_*",
		Reason: "registered by k8s.io/apiserver, which upstream links but never runs (a sidecar serves no API); always zero"},
	{Case: metricsCase, Field: "promhttp_metric_handler_*",
		Reason: "counters of scrapes of /metrics itself (promhttp's default handler), not of provisioning"},
}
