package noderouter

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

const driver = "local.csi.example.com"

func class(name, provisioner string, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
}

func claim(name, class, selected, volume string, labels map[string]string) *v1.PersistentVolumeClaim {
	c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Labels: labels},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class), VolumeName: volume}}
	// Left to the driver by the PV controller.
	c.Annotations = map[string]string{annStorageProvisioner: driver}
	if selected != "" {
		c.Annotations[annSelectedNode] = selected
	}
	return c
}

func volume(name, drv string, hosts []string, labels map[string]string) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: name}}}}
	if hosts != nil {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: hosts}}}}}}
	}
	return pv
}

func node(name, hostname string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: hostname}}}
}

func label(v string) map[string]string { return map[string]string{nodelabel.Key: v} }

// TestRouterLabels: the router labels what the instances do not, and
// leaves the rest.
func TestRouterLabels(t *testing.T) {
	// A node whose name is too long for a label value; its hostname
	// label is shorter, as the kubelet's is.
	long := strings.Repeat("n", 70)
	pool := nodelabel.PoolValue(driver)
	objs := []runtime.Object{
		class("wffc", driver, storagev1.VolumeBindingWaitForFirstConsumer), class("imm", driver, storagev1.VolumeBindingImmediate),
		class("theirs", "other.example.com", storagev1.VolumeBindingImmediate),
		claim("placed", "wffc", "n1", "", nil),
		claim("placed-long", "wffc", long, "", nil),
		claim("pooled", "imm", "", "", nil),
		claim("handed-back", "wffc", "", "", label("n1")),
		claim("moved", "wffc", "n2", "", label("n1")),
		claim("bound-before", "imm", "n2", "pv-old", nil),
		claim("static", "imm", "", "pv-static", label("kept")),
		claim("theirs", "theirs", "n1", "", nil),
		claim("no-class", "missing", "n1", "", nil),
		func() *v1.PersistentVolumeClaim {
			c := claim("pv-controller-not-yet", "wffc", "n1", "", nil)
			delete(c.Annotations, annStorageProvisioner)
			return c
		}(),
		volume("pv-old", driver, []string{"n2"}, nil),
		volume("pv-long", driver, []string{"long-host"}, nil),
		volume("pv-mine", driver, []string{"n1"}, label("n1")),
		volume("pv-nowhere", driver, []string{"gone"}, nil),
		volume("pv-shared", driver, nil, nil),
		volume("pv-two", driver, []string{"n1", "n2"}, nil),
		volume("pv-theirs", "other.example.com", []string{"n1"}, nil),
	}
	wantClaims := map[string]string{"placed": "n1", "placed-long": nodelabel.NodeValue(long), "pooled": pool, "handed-back": "",
		"moved": "n2", "bound-before": "n2", "static": "kept", "theirs": "", "no-class": "", "pv-controller-not-yet": ""}
	wantPVs := map[string]string{"pv-old": "n2", "pv-long": nodelabel.NodeValue(long), "pv-mine": "n1", "pv-nowhere": "",
		"pv-shared": "", "pv-two": "", "pv-theirs": ""}

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(objs...)
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme, node("n1", "n1"), node("n2", "n2"), node(long, "long-host"))
	r, err := New(ctx, Config{Driver: driver}, client, meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		r.Shutdown()
	}()
	go r.Run(ctx)
	var diff []string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		diff = diff[:0]
		for name, want := range wantClaims {
			c, err := client.CoreV1().PersistentVolumeClaims("apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got := c.Labels[nodelabel.Key]; got != want {
				diff = append(diff, "claim "+name+": "+got+", want "+want)
			}
		}
		for name, want := range wantPVs {
			pv, err := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got := pv.Labels[nodelabel.Key]; got != want {
				diff = append(diff, "PV "+name+": "+got+", want "+want)
			}
		}
		return len(diff) == 0, nil
	})
	if err != nil {
		t.Fatalf("labels not as wanted: %v\n%s", err, strings.Join(diff, "\n"))
	}
	r.mu.Lock()
	unplaced := len(r.unplaced)
	r.mu.Unlock()
	if unplaced != 3 {
		t.Errorf("%d unplaced PVs, want 3 (pv-nowhere, pv-shared, pv-two)", unplaced)
	}
}

// TestLabelPatchConditioned: the router's PATCH carries the version it was
// computed from, and null removes the label.
func TestLabelPatchConditioned(t *testing.T) {
	for _, tc := range []struct{ rv, value, want string }{
		{"7", "n1", `{"metadata":{"labels":{"` + nodelabel.Key + `":"n1"},"resourceVersion":"7"}}`},
		{"8", "", `{"metadata":{"labels":{"` + nodelabel.Key + `":null},"resourceVersion":"8"}}`},
	} {
		if got := string(labelPatch(tc.rv, tc.value)); got != tc.want {
			t.Errorf("labelPatch(%q, %q) = %s, want %s", tc.rv, tc.value, got, tc.want)
		}
	}
}
