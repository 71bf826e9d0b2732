package owner

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
)

// fakeObjects maps "Kind/name" to metadata.
type fakeObjects map[string]*metav1.ObjectMeta

func (f fakeObjects) get(_ context.Context, gvk schema.GroupVersionKind, _, name string) (*metav1.ObjectMeta, error) {
	if m, ok := f[gvk.Kind+"/"+name]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("%s/%s not found", gvk.Kind, name)
}

func controlledBy(uid, apiVersion, kind, name, ownerUID string) *metav1.ObjectMeta {
	t := true
	return &metav1.ObjectMeta{UID: types.UID(uid), OwnerReferences: []metav1.OwnerReference{
		{APIVersion: apiVersion, Kind: "Other", Name: "not-the-controller", UID: "x"},
		{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(ownerUID), Controller: &t},
	}}
}

func TestLookup(t *testing.T) {
	objects := fakeObjects{
		"Pod/p":           controlledBy("pod-uid", "apps/v1", "ReplicaSet", "rs", "rs-uid"),
		"ReplicaSet/rs":   controlledBy("rs-uid", "apps/v1", "Deployment", "dep", "dep-uid"),
		"Pod/orphan":      {UID: "orphan-uid"},
		"Pod/bad-version": controlledBy("pod-uid", "a/b/c", "ReplicaSet", "rs", "rs-uid"),
	}
	yes := true
	tests := []struct {
		name    string
		pod     string
		levels  int
		want    *metav1.OwnerReference
		wantErr string
	}{
		{name: "the pod", pod: "p", levels: 0, want: &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pod-uid", Controller: &yes}},
		{name: "its ReplicaSet", pod: "p", levels: 1, want: &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: &yes}},
		{name: "its Deployment", pod: "p", levels: 2, want: &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "dep", UID: "dep-uid", Controller: &yes}},
		{name: "above the Deployment", pod: "p", levels: 3, wantErr: "reading Deployment ns/dep: Deployment/dep not found"},
		{name: "no controller", pod: "orphan", levels: 1, wantErr: "Pod ns/orphan has no controlling owner"},
		{name: "no pod", pod: "missing", levels: 1, wantErr: "reading Pod ns/missing"},
		{name: "bad owner apiVersion", pod: "bad-version", levels: 2, wantErr: "owner of Pod ns/bad-version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			got, err := Lookup(ctx, objects.get, "ns", tc.pod, tc.levels)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Lookup error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("owner (-want +got):\n%s", diff)
			}
		})
	}
}
