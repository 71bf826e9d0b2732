// Package driver is the mock CSI driver: Identity, Controller and Node
// services over gRPC on a unix socket, with topology, per-segment capacity,
// per-node volume limits, fault injection, persistent state and a small
// HTTP admin endpoint for tests. See mock-driver/README.md.
package driver
