package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of upstream-only flags, as upstream has them.
const (
	defaultSnapshotSweep = 5 * time.Minute
	defaultNodeBaseDelay = 20 * time.Second
	defaultNodeMaxDelay  = time.Minute
)

// upstreamGate is one feature gate of upstream's csi-provisioner (its
// pkg/features) and what csi-provisioner does with it.
type upstreamGate struct {
	name string
	// upstreamDefault is the gate's default upstream.
	upstreamDefault bool
	// supported lists the values csi-provisioner accepts.
	supported []bool
	// note says what the accepted values do here, and why the others are
	// refused.
	note string
}

// upstreamGates are the gates --feature-gates knows: upstream's four and
// the AllAlpha/AllBeta switches every Kubernetes feature gate has.
var upstreamGates = []upstreamGate{
	{name: "Topology", upstreamDefault: true, supported: []bool{true},
		note: "GA; csi-provisioner is topology-aware by design, =false is refused"},
	{name: "CrossNamespaceVolumeDataSource", upstreamDefault: false, supported: []bool{false},
		note: "alpha; data sources in another namespace (ReferenceGrants) are not supported, so =true is refused; such claims get a Warning Event"},
	{name: "VolumeAttributesClass", upstreamDefault: true, supported: []bool{true, false},
		note: "GA; as upstream: =true passes the class's parameters as mutable_parameters and names the class on the PV, =false ignores spec.volumeAttributesClassName"},
	{name: "ReleaseLeaderElectionOnExit", upstreamDefault: false, supported: []bool{true, false},
		note: "alpha; the Lease is always released on SIGTERM, whichever the value"},
	{name: "AllAlpha", upstreamDefault: false, supported: []bool{false},
		note: "=true would enable CrossNamespaceVolumeDataSource, which is refused"},
	{name: "AllBeta", upstreamDefault: false, supported: []bool{true, false},
		note: "no effect: upstream has no beta gate"},
}

// enabled says whether a gate is on: its value when given, else its
// upstream default.
func (g featureGates) enabled(name string) bool {
	if v, ok := g[name]; ok {
		return v
	}
	for _, u := range upstreamGates {
		if u.name == name {
			return u.upstreamDefault
		}
	}
	return false
}

// featureGates is the value of --feature-gates: key=value pairs separated
// by commas, as upstream (and every Kubernetes component) parses them. The
// flag may be repeated; later values win.
type featureGates map[string]bool

// String implements flag.Value.
func (g featureGates) String() string {
	pairs := make([]string, 0, len(g))
	for _, k := range slices.Sorted(maps.Keys(g)) {
		pairs = append(pairs, k+"="+strconv.FormatBool(g[k]))
	}
	return strings.Join(pairs, ",")
}

// Set implements flag.Value: it parses every pair; validate checks them.
func (g featureGates) Set(value string) error {
	for pair := range strings.SplitSeq(value, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("missing bool value for %s", k)
		}
		enabled, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("invalid value of %s=%s: %w", k, v, err)
		}
		g[strings.TrimSpace(k)] = enabled
	}
	return nil
}

// validate refuses unknown gates and values csi-provisioner cannot honour,
// in one line naming the first such gate. It runs after parsing, so that
// the refusal is not followed by the whole usage text.
func (g featureGates) validate() error {
	for _, k := range slices.Sorted(maps.Keys(g)) {
		if err := checkGate(k, g[k]); err != nil {
			return err
		}
	}
	return nil
}

// checkGate refuses unknown gates and values csi-provisioner cannot honour.
func checkGate(name string, enabled bool) error {
	i := slices.IndexFunc(upstreamGates, func(u upstreamGate) bool { return u.name == name })
	if i < 0 {
		names := make([]string, 0, len(upstreamGates))
		for _, u := range upstreamGates {
			names = append(names, u.name)
		}
		return fmt.Errorf("unknown feature gate %q (known: %s)", name, strings.Join(names, ", "))
	}
	if u := upstreamGates[i]; !slices.Contains(u.supported, enabled) {
		return fmt.Errorf("feature gate %s=%t is not supported: %s", name, enabled, u.note)
	}
	return nil
}

// featureGatesUsage is the help text of --feature-gates.
func featureGatesUsage() string {
	var b strings.Builder
	b.WriteString("Upstream external-provisioner's feature gates, key=value pairs separated by commas. Options are:")
	for _, u := range upstreamGates {
		fmt.Fprintf(&b, "\n%s=true|false (upstream default %t): %s", u.name, u.upstreamDefault, u.note)
	}
	return b.String()
}

// parseOptionalBool parses the value of a boolean flag given as --flag or
// --flag=value.
func parseOptionalBool(s string) error {
	if s == "" {
		return nil
	}
	_, err := strconv.ParseBool(s)
	return err
}
