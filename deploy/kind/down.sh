#!/usr/bin/env bash
# Deletes the quick-start cluster made by deploy/kind/up.sh (its nodes, the
# volumes' data under /var/lib/csi-mock inside them, and its kubeconfig
# context kind-csi-topology). Deleting a cluster that does not exist succeeds.
#
# These scripts could not be run on the project's CI machines, which have no
# Docker engine; they were written and reviewed by hand (bash -n, shellcheck).
set -euo pipefail

if ! command -v kind >/dev/null 2>&1; then
	echo "ERROR: kind is not installed" >&2
	exit 1
fi
kind delete cluster --name csi-topology
