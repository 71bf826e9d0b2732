package main

import (
	"fmt"

	"github.com/spf13/cobra"
	k8sversion "k8s.io/component-base/version"
)

// name is the command's name in --version (cobra's is kube-scheduler's).
const name = "csi-topology-scheduler"

// versionLine is what --version prints: the project's version and the
// Kubernetes version the scheduler is built from, e.g.
// "csi-topology-scheduler v0.3.0 (Kubernetes v1.36.3)".
func versionLine(version string) string {
	return fmt.Sprintf("%s %s (Kubernetes %s)", name, version, k8sversion.Get().GitVersion)
}

// withVersion makes cmd's --version print versionLine instead of
// kube-scheduler's "Kubernetes <version>". kube-scheduler registers the flag
// (k8s.io/component-base/version/verflag) and answers it at the start of its
// RunE, so the answer is given before that RunE runs. --version=raw (the
// whole version.Info) and --version=vX.Y.Z (an override of the reported
// Kubernetes version) keep kube-scheduler's meaning.
func withVersion(cmd *cobra.Command, version string) {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if f := c.Flags().Lookup("version"); f != nil && f.Value.String() == "true" {
			_, err := fmt.Fprintln(c.OutOrStdout(), versionLine(version))
			return err
		}
		return run(c, args)
	}
}
