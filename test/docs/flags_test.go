// Package docs keeps the documentation honest: the flags reference
// (docs/flags.md) must be exactly what each binary's --help prints, and the
// package figure of docs/design.md what go list says.
//
// After changing a flag, or adding a package or an import, regenerate them
// with
//
//	go test ./test/docs/ -update
package docs

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

var update = flag.Bool("update", false, "rewrite docs/flags.md from the binaries' --help and docs/design.md's package figure from go list")

// binaries are documented in this order.
var binaries = []string{"csi-provisioner", "csi-node-publisher", "csi-node-router", "csi-scheduler-extender", "mock-driver", "kubectl-csi_topology"}

const header = `# Flags reference

Generated from each binary's ` + "`--help`" + ` by ` + "`go test ./test/docs/ -update`" + `; ` + "`make test`" + ` fails when
this file and the binaries disagree. Flags are written with one dash here (Go's flag package); two dashes work
the same. Defaults shown are those of an environment without ` + "`NODE_NAME`" + ` and ` + "`NAMESPACE`" + `.

csi-topology-scheduler is kube-scheduler: its flags are kube-scheduler's (` + "`csi-topology-scheduler --help`" + `),
and its own settings are the CSITopology plugin arguments (docs/scheduler.md).

Where clones and snapshot restores may be made is not a flag but a StorageClass annotation, read alike by
csi-provisioner, the scheduler filter and explain: ` + "`csi-topology-provisioner.io/copy-placement`" + ` (` + "`auto`" + `,
` + "`source`" + `, ` + "`anywhere`" + `; docs/data-sources.md, "Topology of copies").
`

// render is the whole reference for the given help texts.
func render(help map[string]string) string {
	var b strings.Builder
	b.WriteString(header)
	for _, bin := range binaries {
		fmt.Fprintf(&b, "\n## %s\n\n```text\n%s```\n", bin, help[bin])
	}
	return b.String()
}

func TestFlagsReference(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkgs := make([]string, 0, len(binaries))
	for _, b := range binaries {
		pkgs = append(pkgs, "./cmd/"+b)
	}
	if err := controlplane.BuildProject(context.Background(), root, dir, pkgs...); err != nil {
		t.Fatal(err)
	}
	help := map[string]string{}
	for _, bin := range binaries {
		var out bytes.Buffer
		cmd := exec.Command(filepath.Join(dir, bin), "--help")
		// A clean environment: defaults taken from NODE_NAME or NAMESPACE
		// must not leak into the reference.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s --help: %v\n%s", bin, err, out.String())
		}
		help[bin] = out.String()
	}
	want := render(help)
	path := filepath.Join(root, "docs", "flags.md")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with go test ./test/docs/ -update)", err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("docs/flags.md does not match --help (-binaries +docs); run go test ./test/docs/ -update:\n%s", diff)
	}
}
