package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Events on bad input: a class with a mistyped
// reserved key, a secret template naming a missing annotation, and a size
// the driver cannot make each give the claim a ProvisioningFailed Event that
// says what is wrong; no volume is made (nothing leaks) and nothing crashes.
func TestBadInputEvents(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	before, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		params map[string]string
		size   string
		want   string
	}{
		{name: "typo", params: map[string]string{"csi.storage.k8s.io/fs-type": "ext4"}, size: "1Gi",
			want: "unknown key(s) csi.storage.k8s.io/fs-type"},
		{name: "template", params: map[string]string{
			"csi.storage.k8s.io/provisioner-secret-name":      "${pvc.annotations['team.example.com/secret']}",
			"csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
		}, size: "1Gi", want: "invalid secret template"},
		{name: "huge", size: "1Pi", want: "OutOfRange"},
	}
	for _, tc := range cases {
		class := lab.NewClass(t, ctx, env.Cluster, ns+"-"+tc.name, lab.ClassOptions{Immediate: true})
		if tc.params != nil {
			sc, err := client.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := client.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			sc.ResourceVersion, sc.Parameters = "", tc.params
			if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name},
			Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(tc.size)}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		name, want := tc.name, tc.want
		if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			return strings.Contains(lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", name), want), nil
		}); err != nil {
			t.Errorf("claim %s: no ProvisioningFailed Event saying %q:%s", name, want, lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", name))
		}
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != v1.ClaimPending {
			t.Errorf("claim %s: %v, phase %v; want Pending", name, err, pvc.Status.Phase)
		}
	}
	after, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("driver volumes %d -> %d: a rejected claim left a volume", len(before), len(after))
	}
	if env.Provisioner().Exited() {
		t.Error("the provisioner exited")
	}
}
