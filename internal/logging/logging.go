// Package logging gives the binaries component-base's logging flags
// (-v, -vmodule, --logging-format=text|json, --log-flush-frequency, ...)
// on a standard FlagSet, as the Kubernetes components and CSI sidecars have
// them.
package logging

import (
	"flag"

	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

// Options are the logging flags of one binary.
type Options struct {
	config *logsapi.LoggingConfiguration
	gate   featuregate.MutableVersionedFeatureGate
}

// AddFlags registers the logging flags on fs.
func AddFlags(fs *flag.FlagSet) *Options {
	o := &Options{config: logsapi.NewLoggingConfiguration(), gate: featuregate.NewFeatureGate()}
	if err := logsapi.AddFeatureGates(o.gate); err != nil {
		panic(err) // only on a programming error: gates added twice
	}
	logsapi.AddGoFlags(o.config, fs)
	return o
}

// Apply validates the parsed flags and configures klog (text or JSON).
// Call it once, after parsing.
func (o *Options) Apply() error {
	logs.InitLogs()
	return logsapi.ValidateAndApply(o.config, o.gate)
}
