package e2eexplain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/explain"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) (context.Context, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	name := "x-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-")
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	return ctx, name
}

type classOpts struct {
	immediate bool
	zones     []string
	params    map[string]string
}

// newClass creates a StorageClass of the mock driver named like the
// namespace, deleted at cleanup.
func newClass(t *testing.T, ctx context.Context, name string, o classOpts) string {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if o.immediate {
		mode = storagev1.VolumeBindingImmediate
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: lab.DriverName,
		VolumeBindingMode: &mode, Parameters: o.params}
	if len(o.zones) > 0 {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: lab.ZoneKey, Values: o.zones}}}}
	}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	return name
}

// newClaim creates a 1Gi claim of class, cloning source when not empty.
func newClaim(t *testing.T, ctx context.Context, ns, name, class, source string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(gi, resource.BinarySI)}}}}
	if source != "" {
		pvc.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source}
		pvc.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: source}
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// newPod creates a pod named like the claim it mounts, required on node
// (kubernetes.io/hostname) when node is not empty.
func newPod(t *testing.T, ctx context.Context, ns, claim, node string) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: claim}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
	if node != "" {
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitBound waits until the claim is Bound.
func waitBound(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == v1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("claim %s/%s not bound: %v", ns, name, err)
	}
}

// runTool runs kubectl-csi_topology with args and returns its stdout.
func runTool(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// conclusionLine is the text output's conclusion line.
func conclusionLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "conclusion (") {
			return l
		}
	}
	return ""
}

// waitCause runs the tool on the claim (text, then JSON) until its
// conclusion line names cause and contains want, and returns the text.
func waitCause(t *testing.T, ctx context.Context, ns, claim string, cause explain.Cause, want string) string {
	t.Helper()
	var out string
	var err error
	prefix := fmt.Sprintf("conclusion (%s): ", cause)
	if werr := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		out, err = runTool(ctx, env.Cluster.Kubeconfig, "explain", "pvc/"+claim, "-n", ns)
		line := conclusionLine(out)
		return err == nil && strings.HasPrefix(line, prefix) && strings.Contains(line, want), nil
	}); werr != nil {
		t.Fatalf("explain pvc/%s never concluded %q with %q: %v\n%s", claim, cause, want, err, out)
	}
	js, err := runTool(ctx, env.Cluster.Kubeconfig, "explain", "pvc/"+claim, "-n", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, js)
	}
	if r.Cause != cause || r.Claim != ns+"/"+claim || len(r.Chain) == 0 {
		t.Errorf("-o json: cause %s, claim %s, %d line(s); want %s, %s/%s and the chain\n%s", r.Cause, r.Claim, len(r.Chain), cause, ns, claim, js)
	}
	t.Logf("explain pvc/%s:\n%s", claim, out)
	return out
}
