package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// The README's first screen: its two commands in the first lines, samples
// that fit a terminal, and a size that a newcomer reads (the detail lives
// in docs/).
func TestReadmeFirstScreen(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const maxSize, firstLines, maxCodeLine = 12 << 10, 10, 120
	if len(data) > maxSize {
		t.Errorf("README.md is %d bytes, at most %d: move detail to docs/", len(data), maxSize)
	}
	lines := strings.Split(string(data), "\n")
	for _, cmd := range []string{"make run", "make test"} {
		found := false
		for _, l := range lines[:min(firstLines, len(lines))] {
			found = found || strings.HasPrefix(l, cmd+" ")
		}
		if !found {
			t.Errorf("no line of the first %d starts with %q", firstLines, cmd)
		}
	}
	inCode := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
			continue
		}
		if inCode && len([]rune(l)) > maxCodeLine {
			t.Errorf("README.md:%d: a line of %d characters in a code block, at most %d", i+1, len([]rune(l)), maxCodeLine)
		}
	}
}
