package docs

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// progressTool is the Makefile's PROGRESS: it runs a step and prints a
// status line at least every 30 s (test/harness/cmd/progress).
const progressTool = ".cache/tools/progress"

// `make run` and `make build`, the README's first commands, follow the rule
// of `make test`: never two minutes without a line. Every go build they run
// goes through the progress tool, except the build of that small tool
// itself (the standard library only).
func TestMakeRunShowsProgress(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"run", "build"} {
		t.Run(target, func(t *testing.T) {
			// -B: every recipe, as on a fresh machine; -n: printed, not run.
			cmd := exec.Command("make", "-n", "-B", "--no-print-directory", target)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("make -n %s: %v", target, err)
			}
			builds := 0
			for _, line := range strings.Split(string(out), "\n") {
				line = strings.TrimSpace(line)
				if !strings.Contains(line, "go build") || strings.Contains(line, "-o "+progressTool) {
					continue
				}
				builds++
				if !strings.HasPrefix(line, progressTool+" ") || !strings.Contains(line, " -packages -- go build -v ") {
					t.Errorf("make %s runs a go build without progress lines:\n%s", target, line)
				}
			}
			if builds == 0 {
				t.Errorf("make -n %s printed no go build:\n%s", target, out)
			}
		})
	}
}
