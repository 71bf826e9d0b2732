package manifests

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// routerUser is the user csi-node-router runs as: the ServiceAccount the
// node deployment's router Deployment runs under (checked against the
// rendered Deployment by TestRouterRBACIsWhatItUses).
const routerUser = "system:serviceaccount:csi-topology:csi-node-router"

// auditPolicy has kube-apiserver log csi-node-router's requests only,
// without bodies, for TestRouterRBACIsWhatItUses.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + routerUser + `"]
- level: None
`

// auditedGrants reads the requests of user received at or after since in
// the audit log at path, once each, and returns the grants they need, in
// the terms of effectiveGrants: a request in one of the fixed namespaces
// needs its verb there; any other namespaced request (a claim's, in a
// namespace of the user's) and a cluster-scoped or all-namespaces one
// needs it cluster-wide. refused lists the requests the API server
// refused as forbidden; nonResource the requests of non-resource URLs.
func auditedGrants(path, user string, since time.Time, fixed ...string) (used grants, refused, nonResource []string, err error) {
	used = grants{}
	err = controlplane.ReadAuditLog(path, func(e controlplane.AuditEvent) {
		if e.User.Username != user || e.RequestReceived.Before(since) {
			return
		}
		if e.ObjectRef == nil {
			nonResource = append(nonResource, e.Verb+" "+e.RequestURI)
			return
		}
		res := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			res += "/" + e.ObjectRef.Subresource
		}
		if e.ObjectRef.APIGroup != "" {
			res += "." + e.ObjectRef.APIGroup
		}
		scope := e.ObjectRef.Namespace
		if !slices.Contains(fixed, scope) {
			scope = ""
		}
		used.add(scope, res, e.Verb)
		if e.ResponseStatus != nil && e.ResponseStatus.Code == 403 {
			refused = append(refused, fmt.Sprintf("%s %s (namespace %q)", e.Verb, res, e.ObjectRef.Namespace))
		}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return used, refused, nonResource, nil
}

// grantLines lists grants one "scope resource verb" a line, for messages.
func grantLines(g grants) []string {
	var out []string
	for scope, rs := range g {
		for r, verbs := range rs {
			for _, v := range verbs {
				s := scope
				if s == "" {
					s = "(cluster)"
				}
				out = append(out, s+" "+r+" "+v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// uncovered returns what used needs that granted covers neither in its
// scope nor cluster-wide.
func uncovered(used, granted grants) grants {
	out := grants{}
	for scope, rs := range used {
		for r, verbs := range rs {
			for _, v := range verbs {
				if !granted.has(scope, r, v) && !granted.has("", r, v) {
					out.add(scope, r, v)
				}
			}
		}
	}
	return out
}

// unused lists what granted grants that used does not need in that same
// scope; a cluster-wide grant used only in some namespaces says which (a
// Role there suffices).
func unused(granted, used grants) []string {
	var out []string
	for scope, rs := range granted {
		for r, verbs := range rs {
			for _, v := range verbs {
				if used.has(scope, r, v) {
					continue
				}
				line := scope + " " + r + " " + v
				if scope == "" {
					line = "(cluster) " + r + " " + v
					var in []string
					for ns := range used {
						if ns != "" && used.has(ns, r, v) {
							in = append(in, ns)
						}
					}
					if len(in) > 0 {
						slices.Sort(in)
						line += ": used only in namespace " + strings.Join(in, ", ") + ", grant it by a Role there"
					}
				}
				out = append(out, line)
			}
		}
	}
	slices.Sort(out)
	return out
}

// describe is grantLines joined for a message.
func (g grants) describe() string { return strings.Join(grantLines(g), "\n  ") }
