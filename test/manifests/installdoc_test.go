package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"
)

// writeInstallDocOverlay writes the files of acme/ that docs/install.md
// shows into a temporary directory next to a copy of deploy/, and returns
// acme/ and the names of the files, sorted.
func writeInstallDocOverlay(t *testing.T) (string, []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(cluster.RepoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "deploy", "kubernetes"), os.DirFS(filepath.Join(cluster.RepoRoot, "deploy", "kubernetes"))); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "acme")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range docFile.FindAllSubmatch(doc, -1) {
		name := string(m[1])
		names = append(names, name)
		if err := os.WriteFile(filepath.Join(overlay, name), m[2], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	return overlay, names
}

// docFile is a file the install guide shows: a line that starts with
// `acme/<name>`, then, after any text, a YAML block.
var docFile = regexp.MustCompile("(?ms)^`acme/([\\w.-]+)`.*?\n```yaml\n(.*?)```\n")

// TestInstallDocOverlay renders the example overlay of docs/install.md, the
// files exactly as shown, next to a copy of deploy/, and checks it like a
// shipped overlay: it installs csi.acme.io and keeps nothing of the
// placeholder.
func TestInstallDocOverlay(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	overlay, names := writeInstallDocOverlay(t)
	want := []string{"controller-flags.yaml", "kustomization.yaml", "node-flags.yaml", "node-paths.yaml", "scheduler-config.yaml"}
	if !slices.Equal(names, want) {
		t.Fatalf("docs/install.md shows the files %v of acme/, want %v", names, want)
	}

	objs := render(t, overlay)
	have := index(objs)
	for _, w := range []kindName{
		{"CSIDriver", "", "csi.acme.io"},
		{"Deployment", "csi-topology", "csi-controller"},
		{"DaemonSet", "csi-topology", "csi-node"},
		{"ConfigMap", "csi-topology", "csi-topology-scheduler-config"},
		{"StorageClass", "", "csi-zonal-restricted"},
	} {
		if have[w] == nil {
			t.Errorf("the overlay of docs/install.md renders no %s %s/%s", w.kind, w.namespace, w.name)
		}
	}
	if ds := have[kindName{"DaemonSet", "csi-topology", "csi-node"}]; ds != nil {
		data, _ := yaml.Marshal(ds.Object)
		for _, s := range []string{"--kubelet-registration-path=/var/lib/kubelet/plugins/csi.acme.io/csi.sock", "path: /var/lib/kubelet/plugins/csi.acme.io\n"} {
			if !strings.Contains(string(data), s) {
				t.Errorf("the node DaemonSet of docs/install.md's overlay lacks %q", s)
			}
		}
	}
	for _, o := range objs {
		if o.GetKind() == "StorageClass" {
			if p, _, _ := unstructured.NestedString(o.Object, "provisioner"); p != "csi.acme.io" {
				t.Errorf("StorageClass %s of docs/install.md's overlay: provisioner %q", o.GetName(), p)
			}
		}
	}
	checkRendered(t, ctx, "docs/install.md's overlay", objs, true)
}
