package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// absent stands for a field one side has and the other has not.
const absent = "<absent>"

var (
	volumeIDs   = regexp.MustCompile(`\bvol-[0-9]+\b`)
	snapshotIDs = regexp.MustCompile(`\bsnap-[0-9]+\b`)
	identities  = regexp.MustCompile(`\b[0-9]+-[0-9]+-<driver>`)
)

// norm replaces what differs between the sides by nature: the claims' UIDs
// (<uid:claim>), the driver name, the namespace (also the names of the
// class and VolumeAttributesClass), the mock driver's volume and snapshot
// IDs and the csiProvisionerIdentity value.
func (r *run) norm(s string) string {
	n, _ := strconv.Atoi(flagValue(profiles[r.profile()].flags, "volume-name-uuid-length"))
	for claim, uid := range r.uids {
		s = strings.ReplaceAll(s, uid, "<uid:"+claim+">")
		if n > 0 {
			s = strings.ReplaceAll(s, cutUID(uid, n), "<uid:"+claim+">")
		}
	}
	s = strings.ReplaceAll(s, r.driver(), "<driver>")
	s = strings.ReplaceAll(s, r.ns, "<ns>")
	s = volumeIDs.ReplaceAllString(s, "<vol>")
	s = snapshotIDs.ReplaceAllString(s, "<snap>")
	return identities.ReplaceAllString(s, "<identity>")
}

// observe records the claim "data", its PV, the provisioner's Events on
// both, the driver's calls for the case's claims and the driver's
// volumes, each field under prefix.
func (r *run) observe(ctx context.Context, prefix string) (map[string]string, error) {
	out := map[string]string{}
	put := func(path string, v any) { flatten(prefix+path, toJSON(v), out) }
	c := env.client
	pvc, err := c.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, "data", metav1.GetOptions{})
	if err == nil && pvc.Spec.VolumeName != "" {
		r.pv = pvc.Spec.VolumeName
	}
	pvName := r.pvName()
	switch {
	case isGone(err):
		put("claim", "<gone>")
	case err != nil:
		return nil, err
	default:
		put("claim.annotations", pvc.Annotations)
		put("claim.finalizers", set(pvc.Finalizers))
		put("claim.phase", pvc.Status.Phase)
		put("claim.volumeName", pvc.Spec.VolumeName)
	}
	if err := r.observeEvents(ctx, "PersistentVolumeClaim", "data", prefix+"claim.events", out); err != nil {
		return nil, err
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	switch {
	case isGone(err):
		put("pv", "<gone>")
	case err != nil:
		return nil, err
	default:
		put("pv.annotations", pv.Annotations)
		put("pv.labels", pv.Labels)
		put("pv.finalizers", set(pv.Finalizers))
		put("pv.phase", pv.Status.Phase)
		spec := pv.Spec.DeepCopy()
		if spec.ClaimRef != nil {
			spec.ClaimRef.ResourceVersion = ""
		}
		put("pv.spec", spec)
		if err := r.observeEvents(ctx, "PersistentVolume", pvName, prefix+"pv.events", out); err != nil {
			return nil, err
		}
	}
	if err := r.observeDriver(ctx, prefix, out); err != nil {
		return nil, err
	}
	if profiles[r.profile()].capacity && prefix == "" {
		if err := r.observeCapacity(ctx, out); err != nil {
			return nil, err
		}
	}
	if len(r.waits) > 0 {
		put("waits", r.waits)
	}
	normalised := make(map[string]string, len(out))
	for k, v := range out {
		normalised[r.norm(k)] = r.norm(v)
	}
	return normalised, nil
}

// observeEvents records the provisioner's Events on an object: per type
// and reason ("Warning ProvisioningFailed"), the distinct shapes of their
// messages (messageShape), sorted and joined with " | ".
func (r *run) observeEvents(ctx context.Context, kind, name, path string, out map[string]string) error {
	evs, err := r.events(ctx, kind, name)
	if err != nil {
		return err
	}
	shapes := map[string][]string{}
	for _, e := range evs {
		key, shape := e.Type+" "+e.Reason, messageShape(r.norm(e.Message))
		if !slices.Contains(shapes[key], shape) {
			shapes[key] = append(shapes[key], shape)
		}
	}
	joined := make(map[string]string, len(shapes))
	for k, v := range shapes {
		sort.Strings(v)
		joined[k] = strings.Join(v, " | ")
	}
	flatten(path, toJSON(joined), out)
	return nil
}

// numbers are the runs of digits a message shape hides.
var numbers = regexp.MustCompile(`[0-9]+`)

// messageShape is an Event message with what varies from run to run
// hidden: after norm (claim UIDs, namespace, driver, volume and snapshot
// IDs), every number becomes <n> (sizes, durations, counts, node and
// zone indices), so that two messages that say the same of different
// objects have one shape.
func messageShape(msg string) string {
	return numbers.ReplaceAllString(msg, "<n>")
}

// set turns a list whose order carries no meaning (finalizers, Event
// reasons) into a map item -> "yes", so that a missing item is one
// difference, not a shift of every later index.
func set(items []string) map[string]string {
	out := make(map[string]string, len(items))
	for _, i := range items {
		out[i] = "yes"
	}
	return out
}

// observeDriver records the driver's calls for the case (by the claims'
// volume names, the volumes made for them, the static volume and the
// case's snapshot) since the previous observation, each method's distinct
// requests in the order first seen, their codes, and the case's volumes
// the driver still has.
func (r *run) observeDriver(ctx context.Context, prefix string, out map[string]string) error {
	var calls []driver.CallRecord
	if err := lab.AdminCall(ctx, r.inst.adminURL, "GET", "/requests", nil, &calls); err != nil {
		return err
	}
	var vols []driver.VolumeStatus
	if err := lab.AdminCall(ctx, r.inst.adminURL, "GET", "/volumes", nil, &vols); err != nil {
		return err
	}
	mine := map[string]bool{"static-" + r.ns: true, r.ns + "-snap": true}
	for _, uid := range r.uids {
		mine["pvc-"+uid], mine[volumeName(r.profile(), uid)] = true, true
	}
	for _, v := range vols {
		if mine[v.Name] {
			mine[v.ID] = true
		}
	}
	for _, c := range calls {
		if c.Method == "CreateVolume" && mine[c.Name] && c.Code == "OK" {
			mine[c.Result] = true
		}
	}
	seen := map[string][]string{}
	codes := map[string][]string{}
	after := r.lastSeq
	for _, c := range calls {
		r.lastSeq = max(r.lastSeq, c.Seq)
		if c.Seq <= after || (!mine[c.Name] && !mine[c.VolumeID]) {
			continue
		}
		req := r.norm(string(c.Request))
		if !slices.Contains(seen[c.Method], req) {
			seen[c.Method] = append(seen[c.Method], req)
		}
		if !slices.Contains(codes[c.Method], c.Code) {
			codes[c.Method] = append(codes[c.Method], c.Code)
		}
	}
	for method, reqs := range seen {
		for i, req := range reqs {
			var v any
			if err := json.Unmarshal([]byte(req), &v); err != nil {
				return err
			}
			flatten(fmt.Sprintf("%scalls.%s[%d]", prefix, method, i), v, out)
		}
		sort.Strings(codes[method])
		flatten(prefix+"calls."+method+".codes", toJSON(codes[method]), out)
	}
	var left []string
	for _, v := range vols {
		if mine[v.Name] {
			left = append(left, r.norm(v.Name))
		}
	}
	sort.Strings(left)
	flatten(prefix+"driver.volumes", toJSON(left), out)
	return nil
}

// toJSON turns v into its generic JSON value.
func toJSON(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return err.Error()
	}
	return out
}

// flatten writes v's leaves into out under dotted paths; map keys with a
// dot, slash or space are bracketed (annotations[pv.kubernetes.io/provisioned-by]).
// Empty lists and maps are written as [] and {}, null not at all.
func flatten(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case nil:
	case map[string]any:
		if len(x) == 0 {
			out[path] = "{}"
		}
		for k, e := range x {
			if strings.ContainsAny(k, "./ ") {
				flatten(path+"["+k+"]", e, out)
			} else {
				flatten(path+"."+k, e, out)
			}
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
		}
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	case string:
		out[path] = x
	default:
		data, _ := json.Marshal(x)
		out[path] = string(data)
	}
}
