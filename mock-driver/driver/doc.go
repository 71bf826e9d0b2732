// Package driver is the mock CSI driver: the Identity, Controller and Node
// services of CSI spec v1.13 over gRPC on a unix socket, with a segment table
// (topology segments with capacities), per-node volume limits, fault
// injection, volumes persisted to a state file, an HTTP admin endpoint for
// tests (loopback only) and an HTTP health endpoint for liveness probes.
//
// A Driver serves one of three modes: a controller instance next to the
// provisioner, one node instance per (fake) node, or both in one process
// (csi-sanity, unit tests). Its gRPC server logs every call (secrets
// stripped) at V(4), applies the fault rules, and records CreateVolume
// requests; calling the methods in-process skips those three.
//
// See mock-driver/README.md for the flags, the file formats and the admin
// API.
package driver
