package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTrimForCache(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	limit := v1.ResourceName("attachable-volumes-csi-mock.csi.example.com")
	tests := []struct {
		name string
		in   any
		want any
	}{
		{
			name: "node keeps labels and attach limits",
			in: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u", Labels: map[string]string{"zone": "z1"}, Annotations: map[string]string{"a": "b"}, ManagedFields: managed},
				Spec:       v1.NodeSpec{ProviderID: "fake://n1"},
				Status: v1.NodeStatus{
					Allocatable: v1.ResourceList{limit: resource.MustParse("16"), v1.ResourcePods: resource.MustParse("110")},
					Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
				},
			},
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u", Labels: map[string]string{"zone": "z1"}},
				Status:     v1.NodeStatus{Allocatable: v1.ResourceList{limit: resource.MustParse("16")}},
			},
		},
		{
			name: "node without attach limits",
			in:   &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourcePods: resource.MustParse("110")}}},
			want: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		},
		{
			name: "pod keeps spec and phase",
			in: &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ManagedFields: managed},
				Spec:       v1.PodSpec{NodeName: "n1"},
				Status:     v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady}}, PodIP: "10.0.0.1"},
			},
			want: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{NodeName: "n1"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
		},
		{
			name: "claim loses managedFields",
			in:   &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: managed}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv"}},
			want: &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimForCache(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("trimForCache (-want +got):\n%s", diff)
			}
			again, _ := trimForCache(got)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}
