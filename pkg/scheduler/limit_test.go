package scheduler

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func csiVolume(name, handle string) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}}}
}

func boundClaim(name, volume string) *v1.PersistentVolumeClaim {
	c := claim(name, "fast", gi)
	c.Spec.VolumeName = volume
	return c
}

func selectedClaim(name, node string) *v1.PersistentVolumeClaim {
	c := claim(name, "fast", gi)
	c.Annotations = map[string]string{annSelectedNode: node}
	return c
}

// limitWorld has node n1 (zone z1, attach limit limit) running a pod that
// uses the bound claim "used"; the bound claim "other" is used nowhere;
// "new1" and "new2" are pending, "sel" is pending and selected for n1. So
// n1 counts 2 volumes.
func limitWorld(t *testing.T, limit int32) (*world, *Core) {
	t.Helper()
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	w.add(t, w.nodes, node("n1", "z1"))
	w.add(t, w.csiNodes, csiNode("n1", ptr.To(limit), driver))
	w.add(t, w.volumes, csiVolume("pv-used", "h-used"), csiVolume("pv-other", "h-other"))
	w.add(t, w.claims, boundClaim("used", "pv-used"), boundClaim("other", "pv-other"),
		claim("new1", "fast", gi), claim("new2", "fast", gi), selectedClaim("sel", "n1"))
	running := pod("running", "used")
	running.Spec.NodeName = "n1"
	w.add(t, w.pods, running)
	return w, w.core(t, nil)
}

// The attach limit counts a pod's volume once when the node already uses
// it, and counts the reservations of other pods that the node's count does
// not include yet.
func TestFilterAttachLimit(t *testing.T) {
	tests := []struct {
		name  string
		limit int32
		// reserved are claims other pods reserved on n1 (not yet annotated).
		reserved []string
		// observed are claims whose selected-node annotation the ledger saw.
		observed []string
		// reserveSelf reserves the pod itself on n1 first (a retried cycle).
		reserveSelf bool
		pod         *v1.Pod
		want        Reason
	}{
		{name: "bound volume already used on the node is not new", limit: 3, pod: pod("p", "used", "new1")},
		{name: "bound volume used elsewhere is new", limit: 3, pod: pod("p", "other", "new1"), want: ReasonVolumeLimitExceeded},
		{name: "bound volume named twice is new once", limit: 3, pod: pod("p", "other", "other")},
		{name: "pending claim the node counts is not new", limit: 2, pod: pod("p", "sel")},
		{name: "another pod's reservation counts", limit: 3, reserved: []string{"new2"}, pod: pod("p", "new1"), want: ReasonVolumeLimitExceeded},
		{name: "another pod's reservation fits under a larger limit", limit: 4, reserved: []string{"new2"}, pod: pod("p", "new1")},
		{name: "an annotated reservation counts once", limit: 3, observed: []string{"sel"}, pod: pod("p", "new1")},
		{name: "the pod's own reservation does not count", limit: 3, reserveSelf: true, pod: pod("p", "new1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, c := limitWorld(t, tc.limit)
			n1 := node("n1", "z1")
			for _, name := range tc.reserved {
				podVols, err := c.PodVolumes(pod("r-"+name, name))
				if err != nil {
					t.Fatal(err)
				}
				c.Reserve(podVols, n1)
			}
			for _, name := range tc.observed {
				obj, _, _ := w.claims.GetByKey("ns/" + name)
				c.ObserveClaim(obj.(*v1.PersistentVolumeClaim), n1)
			}
			podVols, err := c.PodVolumes(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reserveSelf {
				c.Reserve(podVols, n1)
			}
			st := c.Filter(podVols, n1)
			switch {
			case tc.want == "" && st != nil:
				t.Errorf("Filter = %v, want fit", st)
			case tc.want != "" && (st == nil || st.Reason != tc.want || st.Unresolvable):
				t.Errorf("Filter = %v, want %s (resolvable)", st, tc.want)
			}
		})
	}
}

// A pod that names the same claim twice asks for it once.
func TestPodVolumesDeduplicates(t *testing.T) {
	_, c := limitWorld(t, 10)
	podVols, err := c.PodVolumes(pod("p", "new1", "new1", "used", "used"))
	if err != nil {
		t.Fatal(err)
	}
	if len(podVols.Pending) != 1 || len(podVols.Bound) != 1 || podVols.perClass["fast"] != gi {
		t.Errorf("pending %d, bound %d, fast %d bytes; want 1, 1, %d", len(podVols.Pending), len(podVols.Bound), podVols.perClass["fast"], gi)
	}
}
