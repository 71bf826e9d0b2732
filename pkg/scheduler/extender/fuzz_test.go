package extender

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// FuzzExtenderRequest posts arbitrary bodies to both verbs: the answer is a
// 200 with a reply that decodes, a 400 or a 413, never a panic or a 500.
func FuzzExtenderRequest(f *testing.F) {
	for _, s := range []string{
		`{"pod":{"metadata":{"name":"p","namespace":"ns"}},"nodenames":["n1","n2","gone"]}`,
		`{"pod":{"metadata":{"name":"p"},"spec":{"volumes":[{"persistentVolumeClaim":{"claimName":"c"}}]}},"nodes":{"items":[{"metadata":{"name":"n1"}}]}}`,
		`{"pod":{}}`, `{"pod":null}`, `{}`, `[`, `{"pod":{}} {"pod":{}}`, `{"nodenames":null,"nodes":null,"pod":{}}`,
	} {
		f.Add(s)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []string{"n1", "n2"} {
		if err := idx.Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			f.Fatal(err)
		}
	}
	core := fakeCore{ours: true, status: map[string]*scheduler.Status{"n2": {Reason: scheduler.ReasonDriverNotRegistered, Unresolvable: true}},
		scores: map[string]int64{"n1": scheduler.MaxScore}}
	mux := http.NewServeMux()
	New(core, corelisters.NewNodeLister(idx), klog.Background(), nil).Register(mux)
	f.Fuzz(func(t *testing.T, body string) {
		for _, verb := range []string{"filter", "prioritize"} {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+verb, strings.NewReader(body)))
			switch rec.Code {
			case http.StatusOK:
				var out any = &extenderv1.ExtenderFilterResult{}
				if verb == "prioritize" {
					out = &extenderv1.HostPriorityList{}
				}
				if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
					t.Fatalf("%s: 200 with a reply that does not decode: %v\n%s", verb, err, rec.Body.String())
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
				if !strings.Contains(rec.Body.String(), "malformed "+verb+" request") {
					t.Fatalf("%s: %d without the reason: %q", verb, rec.Code, rec.Body.String())
				}
			default:
				t.Fatalf("%s: status %d for body %q: %s", verb, rec.Code, body, rec.Body.String())
			}
		}
	})
}
