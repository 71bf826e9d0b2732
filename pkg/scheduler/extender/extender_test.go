package extender

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// fakeCore rejects nodes by name and scores by a table.
type fakeCore struct {
	ours   bool
	status map[string]*scheduler.Status
	scores map[string]int64
}

func (f fakeCore) PodVolumes(*v1.Pod) (*scheduler.PodVolumes, error) {
	if !f.ours {
		return nil, nil
	}
	return &scheduler.PodVolumes{Pod: "ns/p"}, nil
}

func (f fakeCore) Filter(_ *scheduler.PodVolumes, n *v1.Node) *scheduler.Status {
	return f.status[n.Name]
}
func (f fakeCore) Score(_ *scheduler.PodVolumes, n *v1.Node) int64 { return f.scores[n.Name] }

func server(t *testing.T, core Core, nodes ...string) *httptest.Server {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := idx.Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	return serverWithNodes(t, core, corelisters.NewNodeLister(idx))
}

func serverWithNodes(t *testing.T, core Core, nodes corelisters.NodeLister) *httptest.Server {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	mux := http.NewServeMux()
	New(core, nodes, logger, nil).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, body string, out any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func args(names ...string) string {
	return argsFor(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}, names...)
}

func argsFor(pod *v1.Pod, names ...string) string {
	data, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	return string(data)
}

func TestBadRequests(t *testing.T) {
	srv := server(t, fakeCore{})
	for _, tc := range []struct {
		name, path, body string
		want             int
	}{
		{"malformed JSON", "/filter", "{not json", http.StatusBadRequest},
		{"trailing data", "/prioritize", args("a") + "{}", http.StatusBadRequest},
		{"no pod", "/filter", `{"nodenames":["a"]}`, http.StatusBadRequest},
		{"too large", "/filter", `{"pod":{"metadata":{"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}}}`, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := post(t, srv.URL+tc.path, tc.body, nil); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
		})
	}
	resp, err := http.Get(srv.URL + "/filter")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /filter: %d", resp.StatusCode)
	}
}

func TestFilterAndPrioritize(t *testing.T) {
	core := fakeCore{
		ours: true,
		status: map[string]*scheduler.Status{
			"bare":  {Reason: scheduler.ReasonDriverNotRegistered, Message: "no driver", Unresolvable: true},
			"full2": {Reason: scheduler.ReasonVolumeLimitExceeded, Message: "limit"},
		},
		scores: map[string]int64{"good": 100, "bare": 0, "half": 50},
	}
	srv := server(t, core, "good", "bare", "full2", "half")
	var res extenderv1.ExtenderFilterResult
	if code := post(t, srv.URL+"/filter", args("good", "bare", "full2", "half", "unknown"), &res); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if diff := cmp.Diff([]string{"good", "half"}, *res.NodeNames); diff != "" {
		t.Errorf("fitting nodes (-want +got):\n%s", diff)
	}
	if _, ok := res.FailedAndUnresolvableNodes["bare"]; !ok || len(res.FailedAndUnresolvableNodes) != 1 {
		t.Errorf("unresolvable = %v, want bare", res.FailedAndUnresolvableNodes)
	}
	if len(res.FailedNodes) != 2 || res.FailedNodes["full2"] == "" || res.FailedNodes["unknown"] == "" {
		t.Errorf("failed = %v, want full2 and unknown", res.FailedNodes)
	}
	var prio extenderv1.HostPriorityList
	if code := post(t, srv.URL+"/prioritize", args("good", "half", "bare"), &prio); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want := extenderv1.HostPriorityList{{Host: "good", Score: 10}, {Host: "half", Score: 5}, {Host: "bare", Score: 0}}
	if diff := cmp.Diff(want, prio); diff != "" {
		t.Errorf("priorities (-want +got):\n%s", diff)
	}
}

func TestForeignPodPassesUntouched(t *testing.T) {
	srv := server(t, fakeCore{ours: false, status: map[string]*scheduler.Status{"a": {Reason: "x"}}}, "a")
	var res extenderv1.ExtenderFilterResult
	if code := post(t, srv.URL+"/filter", args("a", "b"), &res); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if diff := cmp.Diff([]string{"a", "b"}, *res.NodeNames); diff != "" || len(res.FailedNodes) != 0 {
		t.Errorf("foreign pod filtered: %s %v", diff, res.FailedNodes)
	}
}

// missingClaimCore misses the pod's claim for its first misses calls (the
// extender's claim informer behind the scheduler's), then passes every node.
type missingClaimCore struct {
	fakeCore
	misses, calls *atomic.Int64
}

func (m missingClaimCore) PodVolumes(pod *v1.Pod) (*scheduler.PodVolumes, error) {
	if m.calls.Add(1) <= m.misses.Load() {
		return nil, fmt.Errorf("%w: ns/data", scheduler.ErrClaimNotFound)
	}
	return m.fakeCore.PodVolumes(pod)
}

// A claim the extender's cache has not received yet is waited for; one that
// stays missing fails every node, retriably, and is never an error: an
// ignorable extender's error makes kube-scheduler place the pod without it.
func TestFilterMissingClaim(t *testing.T) {
	old := claimWait
	claimWait = 300 * time.Millisecond
	t.Cleanup(func() { claimWait = old })
	for _, tc := range []struct {
		name   string
		misses int64
		fits   []string
	}{
		{name: "claim arrives while waiting", misses: 2, fits: []string{"a", "b"}},
		{name: "claim still missing", misses: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := missingClaimCore{fakeCore: fakeCore{ours: true}, misses: &atomic.Int64{}, calls: &atomic.Int64{}}
			core.misses.Store(tc.misses)
			srv := server(t, core, "a", "b")
			var res extenderv1.ExtenderFilterResult
			if code := post(t, srv.URL+"/filter", args("a", "b"), &res); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			if res.Error != "" {
				t.Errorf("error %q: an ignorable extender's error lets the pod through unchecked", res.Error)
			}
			if res.NodeNames == nil {
				t.Fatal("no node names in the answer")
			}
			if diff := cmp.Diff(tc.fits, *res.NodeNames, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("fitting nodes (-want +got):\n%s", diff)
			}
			if len(tc.fits) == 0 {
				for _, n := range []string{"a", "b"} {
					if !strings.Contains(res.FailedNodes[n], "claim not found") {
						t.Errorf("node %s: failure %q, want the missing claim", n, res.FailedNodes[n])
					}
				}
				if len(res.FailedAndUnresolvableNodes) != 0 {
					t.Errorf("unresolvable: %v, want retriable failures only", res.FailedAndUnresolvableNodes)
				}
			}
		})
	}
}
