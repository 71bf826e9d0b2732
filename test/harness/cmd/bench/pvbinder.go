package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// pvBinderAgent is what kube-controller-manager appends to the user agent
// of its PV controller's client. The local control plane's
// kube-controller-manager runs as the admin user, like the benchmark's own
// client, so its requests are told apart by user agent, not by user.
const pvBinderAgent = "persistent-volume-binder"

// binderWrite is one update or patch of a PV or claim by the PV controller.
type binderWrite struct {
	at                                           time.Time
	verb, resource, subresource, namespace, name string
	code                                         int
}

// key is "verb resource[/subresource]".
func (w binderWrite) key() string {
	k := w.verb + " " + w.resource
	if w.subresource != "" {
		k += "/" + w.subresource
	}
	return k
}

// binderLog is what the audit log says about binding: the PV controller's
// writes, and when the provisioner's create of each PV was received.
type binderLog struct {
	writes    []binderWrite
	pvCreated map[string]time.Time
}

// readBinderLog reads the PV controller's writes to PVs and claims and the
// provisioner's PV creates from the audit log at path.
func readBinderLog(path string) (binderLog, error) {
	out := binderLog{pvCreated: map[string]time.Time{}}
	err := controlplane.ReadAuditLog(path, func(e controlplane.AuditEvent) {
		if e.ObjectRef == nil || e.ObjectRef.APIGroup != "" {
			return
		}
		code := 0
		if e.ResponseStatus != nil {
			code = e.ResponseStatus.Code
		}
		ref := e.ObjectRef
		switch {
		case (e.User.Username == provisionerUser || e.User.Username == nodeProvisionerUser) &&
			e.Verb == "create" && ref.Resource == "persistentvolumes" && ref.Subresource == "" && code < 400:
			out.pvCreated[ref.Name] = e.RequestReceived
		case strings.Contains(e.UserAgent, pvBinderAgent) && (e.Verb == "update" || e.Verb == "patch") &&
			(ref.Resource == "persistentvolumes" || ref.Resource == "persistentvolumeclaims"):
			out.writes = append(out.writes, binderWrite{at: e.RequestReceived, verb: e.Verb, resource: ref.Resource,
				subresource: ref.Subresource, namespace: ref.Namespace, name: ref.Name, code: code})
		}
	})
	return out, err
}

// binderCounts are the PV controller's writes of one run.
type binderCounts struct {
	// bind are its successful binding writes, mark its marks of claims for
	// the provisioner (before their PV was created).
	bind, mark int
	byKey      map[string]int
}

// count classifies the PV controller's writes to the claims of namespace
// ns and to the PVs of pvClaim (PV name -> claim name) received before
// end. A write to a PV or to a claim's status binds; a write to a claim
// binds once the claim's PV was created (the provisioner's create
// received: pvCreated, else seen at pvSeen), and is the mark before.
func (l binderLog) count(ns string, pvClaim map[string]string, pvSeen map[string]time.Time, end time.Time) binderCounts {
	claimPV := map[string]time.Time{}
	for pv, claim := range pvClaim {
		t, ok := l.pvCreated[pv]
		if !ok {
			t = pvSeen[pv]
		}
		claimPV[claim] = t
	}
	c := binderCounts{byKey: map[string]int{}}
	for _, w := range l.writes {
		if !w.at.Before(end) {
			continue
		}
		switch w.resource {
		case "persistentvolumes":
			if _, ok := pvClaim[w.name]; !ok {
				continue
			}
		case "persistentvolumeclaims":
			if w.namespace != ns {
				continue
			}
		}
		key := w.key()
		if w.code >= 400 {
			c.byKey[fmt.Sprintf("%s (%d)", key, w.code)]++
			continue
		}
		created, ok := claimPV[w.name]
		if w.resource == "persistentvolumeclaims" && w.subresource == "" && (!ok || w.at.Before(created)) {
			c.mark++
			c.byKey[key+" (mark)"]++
			continue
		}
		c.bind++
		c.byKey[key]++
	}
	return c
}

// accountBinder fills the PV controller's writes of a run whose claims are
// in o's namespace, received before end.
func (e *env) accountBinder(r *Result, o *observer, end time.Time) {
	log, err := readBinderLog(e.cluster.AuditLog)
	if err != nil {
		r.Failures = append(r.Failures, "audit log: "+err.Error())
		return
	}
	o.mu.Lock()
	c := log.count(o.ns, o.pvClaim, o.pvAdded, end)
	o.mu.Unlock()
	r.PVControllerWrites = c.byKey
	r.PVControllerBindPerVolume = float64(c.bind) / float64(r.Volumes)
	r.PVControllerMarkPerVolume = float64(c.mark) / float64(r.Volumes)
}
