// Package e2e holds the end-to-end tests of csi-provisioner's contract and
// operation: the real kube-apiserver, kube-controller-manager and stock
// kube-scheduler of test/harness/controlplane, the real csi-provisioner and
// mock-driver binaries (test/harness/lab), and assertions on API objects and on the
// mock driver's state. Provisioning scenarios (binding modes, allowed
// topologies, spreading, full zones, lost nodes, crashes), the PV contract
// (finalizers, deletion, attachments, CSI migration), capacity publishing,
// Events, metrics, leader election, driver loss and log hygiene. The stock
// scheduler comparisons are in test/e2estock, csi-node-publisher in
// test/e2epublisher.
package e2e
