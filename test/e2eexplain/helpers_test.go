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

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/explain"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// podOf is a pause pod of lab.NewPod that mounts claim, required on node
// (kubernetes.io/hostname) when node is not empty.
func podOf(claim, node string) lab.PodOptions {
	o := lab.PodOptions{Claims: []string{claim}}
	if node != "" {
		o.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	return o
}

// cloneOf makes a claim of lab.NewClaim a clone of the claim source.
func cloneOf(source string) func(*v1.PersistentVolumeClaim) {
	return func(pvc *v1.PersistentVolumeClaim) {
		pvc.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source}
		pvc.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: source}
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
