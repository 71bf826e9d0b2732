package main

import (
	"runtime/debug"

	"k8s.io/klog/v2"
)

// nodeGCPercent is the garbage collector's target of a --node-deployment
// instance when the environment sets none: the heap may grow to 1.5 times
// what is live rather than Go's default of twice. A DaemonSet runs one
// instance on every node, so each megabyte counts once per node; at 500
// volumes of its own an instance peaks about 5 MB lower for no measurable
// CPU (docs/node-deployment.md "Sizing").
const nodeGCPercent = 50

// tuneNodeGC sets nodeGCPercent on a --node-deployment instance whose
// environment has no GOGC, which is the operator's choice and is left
// alone. GOMEMLIMIT does not change it: the soft limit (which the
// DaemonSet sets from the container's limit) only makes the collector run
// more often close to it.
func tuneNodeGC(logger klog.Logger, nodeDeployment bool, getenv func(string) string) {
	if !nodeDeployment || getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(nodeGCPercent)
	logger.Info("Garbage collector target of a node's instance; set GOGC to choose another", "gcPercent", nodeGCPercent)
}
