package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// provisionerUser is the user csi-provisioner runs as in the lab (its
// ServiceAccount of deploy/), for whichever binary is measured;
// nodeProvisionerUser the user of the node deployment's instances
// (deploy/kubernetes/components/node-deployment), in the node scenario. One
// provisioner runs at a time.
const (
	provisionerUser     = "system:serviceaccount:csi-topology:csi-provisioner"
	nodeProvisionerUser = "system:serviceaccount:csi-topology:csi-node-provisioner"
)

// auditPolicy records the provisioner's requests, and every user's updates
// and patches of PVs and claims (the PV controller's among them,
// pvbinder.go), without bodies. A watch appears at ResponseStarted and
// again at ResponseComplete; requests are counted once by audit ID.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + provisionerUser + `", "` + nodeProvisionerUser + `"]
- level: Metadata
  verbs: ["update", "patch"]
  resources:
  - group: ""
    resources: ["persistentvolumes", "persistentvolumes/status", "persistentvolumeclaims", "persistentvolumeclaims/status"]
- level: None
`

// request is one API request of the provisioner.
type request struct {
	at time.Time
	// key is "verb resource[/subresource]", followed by " (<code>)" when
	// the API server refused the request: a 429 of its in-flight limit, a
	// 409 conflict, is not the write the key names.
	key string
}

// readAudit returns the provisioner's requests in the audit log, once each,
// in the order received.
func readAudit(path string) ([]request, error) {
	var out []request
	err := controlplane.ReadAuditLog(path, func(e controlplane.AuditEvent) {
		if e.User.Username != provisionerUser && e.User.Username != nodeProvisionerUser {
			return
		}
		key := e.Verb + " (non-resource)"
		if e.ObjectRef != nil {
			key = e.Verb + " " + e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				key += "/" + e.ObjectRef.Subresource
			}
		}
		if e.ResponseStatus != nil && e.ResponseStatus.Code >= 400 {
			key += fmt.Sprintf(" (%d)", e.ResponseStatus.Code)
		}
		out = append(out, request{at: e.RequestReceived, key: key})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out, err
}

// countRequests counts the requests received in [from, to) by key.
func countRequests(reqs []request, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		if !r.at.Before(from) && r.at.Before(to) {
			out[r.key]++
		}
	}
	return out
}

// isEventWrite reports whether a request key posts an Event (either API).
func isEventWrite(key string) bool {
	switch key {
	case "create events", "patch events", "update events":
		return true
	}
	return false
}

// lastEventWrite returns when the last Event write at or after from was
// received (zero without one).
func lastEventWrite(reqs []request, from time.Time) time.Time {
	var last time.Time
	for _, r := range reqs {
		if isEventWrite(r.key) && !r.at.Before(from) {
			last = r.at
		}
	}
	return last
}
