package heartbeat

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
)

// LeaseDriverLabel marks a driver heartbeat Lease (see Heartbeat); its value
// is the CSI driver's name. Consumers list and watch only the Leases that
// carry it (LeaseListOptions), so the kubelets' node Leases, renewed every
// 10 s on every node, never reach them.
const LeaseDriverLabel = "csi-topology-provisioner.io/driver"

// indexLeasesByDriverNode indexes heartbeat Leases by "<driver>/<node>": the
// LeaseDriverLabel value and spec.holderIdentity (see AddLeaseIndexer).
const indexLeasesByDriverNode = "heartbeat/leases-by-driver-node"

// LeaseName returns the name of the heartbeat Lease of driver on node:
// "<driver>-<node>-<hash>", where driver is lower-cased with every character
// a Lease name cannot hold replaced by '-', and hash is 8 hex digits of an
// FNV-1a hash of driver and node, so that two (driver, node) pairs never
// share a name even when their readable parts coincide ("a-b"+"c" and
// "a"+"b-c") or are cut to fit the 253 characters of a name. Example:
// LeaseName("mock.csi.example.com", "node-1") is
// "mock.csi.example.com-node-1-" followed by the hash. The result is always a
// valid object name; it depends on nothing but its arguments.
func LeaseName(driver, node string) string {
	h := fnv.New64a()
	h.Write([]byte(driver))
	h.Write([]byte{0})
	h.Write([]byte(node))
	sum := h.Sum64()
	suffix := fmt.Sprintf("-%08x", uint32(sum))
	readable := sanitizeName(driver) + "-" + node
	if max := validation.DNS1123SubdomainMaxLength - len(suffix); len(readable) > max {
		readable = readable[:max]
	}
	readable = strings.TrimRight(readable, "-.")
	name := readable + suffix
	if readable == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Sprintf("csi-heartbeat-%016x", sum)
	}
	return name
}

// sanitizeName lower-cases s and replaces what a DNS subdomain cannot hold.
func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, s)
}

// LeaseListOptions restricts a Lease informer to heartbeat Leases (those
// with LeaseDriverLabel); pass it to
// informers.WithTweakListOptions. The selector is applied by the
// apiserver, so the informer receives no other Lease.
func LeaseListOptions(o *metav1.ListOptions) {
	o.LabelSelector = LeaseDriverLabel
}

// AddLeaseIndexer adds the indexLeasesByDriverNode index that Liveness reads to
// a Lease informer. Call it before the informer starts.
func AddLeaseIndexer(leases cache.SharedIndexInformer) error {
	if err := leases.AddIndexers(cache.Indexers{indexLeasesByDriverNode: leasesByDriverNode}); err != nil {
		return fmt.Errorf("indexing leases: %w", err)
	}
	return nil
}

func leasesByDriverNode(obj any) ([]string, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, nil
	}
	driver, holder := l.Labels[LeaseDriverLabel], l.Spec.HolderIdentity
	if driver == "" || holder == nil || *holder == "" {
		return nil, nil
	}
	return []string{driverNodeKey(driver, *holder)}, nil
}

func driverNodeKey(driver, node string) string { return driver + "/" + node }

// LeaseLive tells whether a heartbeat Lease is current at now: live while
// now <= renewTime + leaseDurationSeconds (acquireTime when renewTime is
// unset). silentFor is the time since that renewal (0 when the renewal
// lies ahead of now, i.e. the node's clock is ahead of the caller's).
// known is false, with live true, for a nil Lease and for one without a
// renewal time or a duration: no heartbeat, so nothing to hold against the
// node.
func LeaseLive(lease *coordinationv1.Lease, now time.Time) (live bool, silentFor time.Duration, known bool) {
	if lease == nil {
		return true, 0, false
	}
	renewed := lease.Spec.RenewTime
	if renewed == nil {
		renewed = lease.Spec.AcquireTime
	}
	dur := lease.Spec.LeaseDurationSeconds
	if renewed == nil || dur == nil {
		return true, 0, false
	}
	silentFor = max(now.Sub(renewed.Time), 0)
	return silentFor <= time.Duration(*dur)*time.Second, silentFor, true
}

// Liveness answers whether a CSI driver is live on a node, from the
// heartbeat Leases that csi-node-publisher renews while the driver answers
// Probe (see Heartbeat). Every answer is one index lookup in an informer
// store: O(1) in the number of nodes and Leases. Safe for concurrent use.
//
// A node without a heartbeat Lease for the driver is unknown and must be
// treated as live: drivers deployed without our csi-node-publisher, or
// with --lease-duration=0, never have one, and must not be blocked.
type Liveness struct {
	leases cache.Indexer
}

// NewLiveness returns a Liveness over the store of a Lease informer that
// carries the AddLeaseIndexer index (and is best restricted with
// LeaseListOptions); a store without the index is an error. The Leases may
// be in any namespace the informer sees.
func NewLiveness(leases cache.Indexer) (*Liveness, error) {
	if _, ok := leases.GetIndexers()[indexLeasesByDriverNode]; !ok {
		return nil, fmt.Errorf("the lease store lacks the %s index (AddLeaseIndexer)", indexLeasesByDriverNode)
	}
	return &Liveness{leases: leases}, nil
}

// Live tells whether driver is live on node at now (see LeaseLive): live
// while its Lease is current; not live, with the time since the last
// renewal, once it has expired; unknown (known false, live true) without a
// Lease. When several namespaces hold a Lease for the pair, the most
// recently renewed one counts.
func (l *Liveness) Live(driver, node string, now time.Time) (live bool, silentFor time.Duration, known bool) {
	objs, err := l.leases.ByIndex(indexLeasesByDriverNode, driverNodeKey(driver, node))
	if err != nil || len(objs) == 0 {
		return true, 0, false
	}
	live, silentFor, known = true, 0, false
	for _, obj := range objs {
		lease, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		lv, s, k := LeaseLive(lease, now)
		if !k {
			continue
		}
		if !known || s < silentFor {
			live, silentFor, known = lv, s, true
		}
	}
	return live, silentFor, known
}
