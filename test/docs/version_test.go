package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// makeVariable returns a variable of the Makefile as make expands it.
func makeVariable(t *testing.T, root, name string) string {
	t.Helper()
	cmd := exec.Command("make", "-s", "--no-print-directory", "--eval", "print-var: ; @echo $("+name+")", "print-var")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make: expanding %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestSchedulerVersion builds csi-topology-scheduler with the Makefile's
// LDFLAGS and checks that --version names the project's version and the
// Kubernetes release it embeds, with nothing left unstamped ($Format). The
// images are built with the same LDFLAGS (test/images).
func TestSchedulerVersion(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ldflags := makeVariable(t, root, "LDFLAGS")
	version, kube := makeVariable(t, root, "VERSION"), makeVariable(t, root, "KUBE_VERSION")
	if !strings.HasPrefix(kube, "v1.") {
		t.Fatalf("KUBE_VERSION = %q, want go.mod's k8s.io/kubernetes version", kube)
	}
	bin := filepath.Join(t.TempDir(), "csi-topology-scheduler")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./cmd/csi-topology-scheduler")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("--version: %v\n%s", err, out.String())
	}
	want := "csi-topology-scheduler " + version + " (Kubernetes " + kube + ")\n"
	if got := out.String(); got != want || strings.Contains(got, "$Format") {
		t.Errorf("--version printed %q, want %q", got, want)
	}

}
