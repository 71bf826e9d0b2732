package explain

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// recentWindow is how old a sign of the provisioner may be and still say
// that it runs: twice upstream's largest retry interval (5m), within which
// a running provisioner posts again on a claim it fails to provision.
const recentWindow = 10 * time.Minute

// defaultLeaseDuration is upstream's --leader-election-lease-duration.
const defaultLeaseDuration = 15 * time.Second

// Labels of the CSIStorageCapacity objects, upstream external-provisioner's
// names: a node deployment's instance publishes the objects of its node
// with managed-by external-provisioner-<node>.
const (
	labelCapacityDriver    = contract.LabelCapacityDriver
	labelCapacityManagedBy = contract.LabelCapacityManagedBy
	instanceManagedBy      = contract.CapacityManagedBy + "-"
)

// provState is what the evidence says of the driver's provisioner.
type provState int

const (
	// provUnknown: nothing tells whether a provisioner runs.
	provUnknown provState = iota
	// provRunning: a fresh Lease or a recent sign of it.
	provRunning
	// provStopped: its Lease expired longer than a failover takes, and
	// nothing of it came after.
	provStopped
)

// sign is one dated piece of evidence of the provisioner.
type sign struct {
	what string
	at   time.Time
}

// provisionerLine judges the driver's provisioner from every piece of
// evidence there is: its leader Lease, its Events on the claim, the
// in-flight record it put on the claim, and the capacity objects of a node
// deployment's instances. "✗" only when the evidence says that none runs;
// "· unknown" when nothing tells (a single replica without
// --leader-election holds no Lease).
func (e *explainer) provisionerLine() {
	driver := e.s.class.Provisioner
	lease, leaseFresh, leaseStale := e.leaseFacts()
	latest := e.latestSign()
	switch {
	case leaseFresh:
		e.provState = provRunning
		e.add("provisioner", Pass, "provisioner running: %s", lease)
	case latest != nil && e.now.Sub(latest.at) <= recentWindow:
		e.provState = provRunning
		e.add("provisioner", Pass, "provisioner running: %s %s ago (%s)", latest.what, ago(e.now, latest.at), lease)
	case leaseStale && (latest == nil || !latest.at.After(e.leaseExpiry())):
		e.provState = provStopped
		e.add("provisioner", Fail, "no provisioner running: %s, and nothing from a provisioner of %s since", lease, driver)
	default:
		e.provState = provUnknown
		last := "no Event, in-flight record or instance object of it"
		if latest != nil {
			last = fmt.Sprintf("last sign: %s %s ago", latest.what, ago(e.now, latest.at))
		}
		e.add("provisioner", Info, "unknown whether a provisioner of %s runs: %s; %s", driver, lease, last)
	}
}

// leaseFacts describes the leader Lease and says whether it is fresh, and
// whether it expired longer ago than a failover takes (one more duration).
func (e *explainer) leaseFacts() (text string, fresh, stale bool) {
	name := contract.LeaderLeaseName(e.s.class.Provisioner)
	l := e.s.leader
	switch {
	case l == nil && !e.anyRead("list leader lease"):
		return fmt.Sprintf("leader Lease %s could not be read", name), false, false
	case l == nil:
		return fmt.Sprintf("no leader Lease %s (a single replica without --leader-election, or node deployment, holds none)", name), false, false
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	last, dur := renewed(l).Time, leaseDuration(l)
	if !last.IsZero() && e.now.Sub(last) <= dur {
		return fmt.Sprintf("%s holds Lease %s/%s, renewed %s ago", holder, l.Namespace, l.Name, ago(e.now, last)), true, false
	}
	return fmt.Sprintf("Lease %s/%s (last holder %q) expired, last renewed %s ago (duration %s)", l.Namespace, l.Name, holder, ago(e.now, last), dur),
		false, last.IsZero() || e.now.Sub(last) > 2*dur
}

func leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return defaultLeaseDuration
}

// leaseExpiry is when the leader Lease expired (zero without one).
func (e *explainer) leaseExpiry() time.Time {
	if e.s.leader == nil {
		return time.Time{}
	}
	return renewed(e.s.leader).Add(leaseDuration(e.s.leader))
}

// latestSign is the newest dated sign of the driver's provisioner, nil when
// there is none.
func (e *explainer) latestSign() *sign {
	var best *sign
	for _, s := range e.signs() {
		if best == nil || s.at.After(best.at) {
			best = &s
		}
	}
	return best
}

// signs are the dated signs of the driver's provisioner: its Events on the
// claim, the in-flight record (dated by its managedFields entry, or no
// older than the claim), and the capacity objects of node instances.
func (e *explainer) signs() []sign {
	driver := e.s.class.Provisioner
	var out []sign
	for _, ev := range e.s.events {
		if fromProvisioner(ev, driver) {
			out = append(out, sign{fmt.Sprintf("Event %s from %s", ev.Reason, eventSource(ev)), eventTime(ev).Time})
		}
	}
	if at, ok := e.inFlightTime(); ok {
		out = append(out, sign{"in-flight record on the claim, written", at})
	}
	nodes, at := e.instances()
	if len(nodes) > 0 {
		out = append(out, sign{fmt.Sprintf("capacity of the node deployment's instance(s) on %s, written", strings.Join(nodes, ", ")), at})
	}
	return out
}

// fromProvisioner reports whether the Event was posted by a provisioner of
// driver: ours posts as the driver's name, upstream's as
// <driver>_<host>_<uuid>, our in-flight keeper as csi-provisioner.
func fromProvisioner(ev v1.Event, driver string) bool {
	for _, c := range []string{ev.Source.Component, ev.ReportingController} {
		if c == driver || strings.HasPrefix(c, driver+"_") || c == contract.InFlightEventComponent {
			return true
		}
	}
	return false
}

func eventSource(ev v1.Event) string {
	if ev.Source.Component != "" {
		return ev.Source.Component
	}
	return ev.ReportingController
}

// inFlightTime dates the in-flight record on the claim: the newest
// managedFields entry that names the finalizer, else the claim's creation
// (the record is never older than the claim). ok is false without a record.
func (e *explainer) inFlightTime() (at time.Time, ok bool) {
	c := e.s.claim
	found := false
	for _, f := range c.Finalizers {
		found = found || f == contract.InFlightRecordFinalizer
	}
	if !found {
		return time.Time{}, false
	}
	at = c.CreationTimestamp.Time
	for _, m := range c.ManagedFields {
		if m.Time != nil && m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), contract.InFlightRecordFinalizer) && m.Time.After(at) {
			at = m.Time.Time
		}
	}
	return at, !at.IsZero()
}

// instances returns the nodes whose node-deployment instance published
// capacity objects of the driver, and the newest write of them.
func (e *explainer) instances() (nodes []string, newest time.Time) {
	seen := map[string]bool{}
	for _, c := range e.s.capacities {
		mb := c.Labels[labelCapacityManagedBy]
		if c.Labels[labelCapacityDriver] != e.s.class.Provisioner || !strings.HasPrefix(mb, instanceManagedBy) {
			continue
		}
		if node := strings.TrimPrefix(mb, instanceManagedBy); !seen[node] {
			seen[node] = true
			nodes = append(nodes, node)
		}
		t := c.CreationTimestamp.Time
		for _, m := range c.ManagedFields {
			if m.Time != nil && m.Time.After(t) {
				t = m.Time.Time
			}
		}
		if t.After(newest) {
			newest = t
		}
	}
	return sortedStrings(nodes), newest
}

func sortedStrings(s []string) []string {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return sortedKeys(m)
}
