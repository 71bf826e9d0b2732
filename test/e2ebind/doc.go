// Package e2ebind holds the end-to-end tests of bind-through
// (csi-provisioner --bind-through, pkg/bindthrough) on the local control
// plane: claims Bound while kube-controller-manager is down, the PV
// controller writing nothing for them once it is back, objects equal to
// what the PV controller writes for a pre-bound PV, and the binding
// invariants when both race.
package e2ebind
