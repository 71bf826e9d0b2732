// Package explain answers "why is my claim Pending?" for the claims of one CSI
// driver: it reads the claim, its class, the claim's Events, the nodes and
// their CSINode entries, the published CSIStorageCapacity objects, the
// provisioner's leader Lease and the drivers' heartbeat Leases, runs the
// scheduler filter's core (pkg/scheduler, the same code as the plugin and
// the extender) and the topology algebra (pkg/topology, the same code as the
// provisioner) against what it read, and returns the chain of checks, each
// passed or failed with a reason in plain words, and one conclusion: what
// would unblock the claim, or, for a bound claim, what decided its place.
//
// It never writes to the cluster: every read is a get or a paged list, and a
// read that RBAC refuses becomes a line saying what could not be read and
// which rule would allow it.
package explain
