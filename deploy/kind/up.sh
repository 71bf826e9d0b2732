#!/usr/bin/env bash
# Quick start on kind: a cluster of 3 zones, the mock driver with
# csi-provisioner, csi-node-publisher, csi-topology-scheduler and
# csi-scheduler-extender (deploy/kubernetes/overlays/mock), then a 3-replica
# StatefulSet scheduled by csi-topology-scheduler with one claim per replica.
# Prints where each claim landed. Safe to run again: an existing cluster and
# existing objects are reused. See deploy/kind/README.md.
#
# Environment:
#   KIND_NODE_IMAGE  node image for a new cluster (kind create cluster --image);
#                    should be a Kubernetes 1.36 kindest/node image. Default:
#                    the default of your kind release.
#   SKIP_BUILD=1     do not run `make image`; load the image tarballs already
#                    built under bin/images/.
#
# These scripts could not be run on the project's CI machines, which have no
# Docker engine; they were written and reviewed by hand (bash -n, shellcheck).
# The images they load are built and tested there (make image, test/images).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)
cd "$ROOT"

CLUSTER=csi-topology
CONTEXT=kind-$CLUSTER
NAMESPACE=csi-topology
DRIVER=mock.csi.example.com
DRIVER_ZONE_KEY=topology.mock.csi.example.com/zone
ZONE_KEY=topology.kubernetes.io/zone
STORAGE_CLASS=csi-zonal
VERSION=dev
# The workers kind creates for the cluster name csi-topology, and their zones:
# they must match cluster.yaml and the overlay's mock-config.yaml.
WORKERS="csi-topology-worker csi-topology-worker2 csi-topology-worker3"
IMAGES="csi-provisioner csi-node-publisher csi-node-router csi-topology-scheduler csi-scheduler-extender mock-driver"
WORKLOADS="deployment/csi-controller daemonset/csi-node deployment/csi-topology-scheduler deployment/csi-scheduler-extender"

log() { printf '\n==> %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die() {
	printf 'ERROR: %s\n' "$*" >&2
	exit 1
}
# kubectl, always against this cluster whatever the current context is.
k() { kubectl --context "$CONTEXT" "$@"; }

trap 'printf "up.sh: failed at line %s (see the messages above)\n" "$LINENO" >&2' ERR

# wait_until SECONDS COMMAND...: run COMMAND every 2 s until it succeeds;
# fails after SECONDS.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		if ((SECONDS >= deadline)); then
			return 1
		fi
		sleep 2
	done
}

# version_at_least "OUTPUT WITH vMAJOR.MINOR" MAJOR MINOR
version_at_least() {
	local re='v([0-9]+)\.([0-9]+)'
	[[ $1 =~ $re ]] || return 1
	local major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
	((major > $2 || (major == $2 && minor >= $3)))
}

diagnose_system() {
	echo "--- pods in $NAMESPACE" >&2
	k -n "$NAMESPACE" get pods -o wide >&2 || true
	echo "--- recent events in $NAMESPACE" >&2
	k -n "$NAMESPACE" get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 20 >&2 || true
}

diagnose_web() {
	echo "--- pods and claims of the StatefulSet web" >&2
	k -n default get pods,pvc -l app=web -o wide >&2 || true
	echo "--- recent events in default (pods, claims)" >&2
	k -n default get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 25 >&2 || true
	echo "--- CSIStorageCapacity objects" >&2
	k -n "$NAMESPACE" get csistoragecapacities >&2 || true
	echo "More: kubectl --context $CONTEXT describe pod web-0; kubectl --context $CONTEXT -n $NAMESPACE logs deploy/csi-controller -c csi-provisioner (deploy/kind/README.md, Troubleshooting)" >&2
}

# ---------------------------------------------------------------------------
log "Checking tools"
missing=""
tools="kind kubectl docker make"
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
	tools="$tools go"
fi
for tool in $tools; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		missing="$missing $tool"
	fi
done
if [[ -n $missing ]]; then
	die "missing tools:$missing. Install them (deploy/kind/README.md, Prerequisites) and retry."
fi
if ! docker info >/dev/null 2>&1; then
	die "no running Docker engine ('docker info' failed). kind runs its nodes as Docker containers: start Docker, or run this on a machine that has an engine."
fi
# The nodes' architecture, which the images are built for (make image builds
# in Go, without Docker; only this platform, to save time).
node_arch=$(docker info --format '{{.Architecture}}' 2>/dev/null || uname -m)
case $node_arch in
x86_64 | amd64) ARCH=amd64 ;;
aarch64 | arm64) ARCH=arm64 ;;
*) die "unsupported architecture '$node_arch': the images are built for amd64 and arm64" ;;
esac
if ! version_at_least "$(kind version 2>/dev/null || true)" 0 20; then
	warn "kind >= 0.20 is expected (per-node labels in cluster.yaml); found: $(kind version 2>/dev/null || echo unknown)"
fi
if ! version_at_least "$(kubectl version --client 2>/dev/null || true)" 1 30; then
	warn "kubectl >= 1.30 is expected; found: $(kubectl version --client 2>/dev/null | head -n 1 || echo unknown)"
fi

# ---------------------------------------------------------------------------
# (Not `kind get clusters | grep -q`: with pipefail an early grep exit could
# fail the pipeline.)
clusters=$(kind get clusters 2>/dev/null || true)
if grep -qx "$CLUSTER" <<<"$clusters"; then
	log "Cluster $CLUSTER exists: reusing it"
	if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
		warn "KIND_NODE_IMAGE is ignored for an existing cluster (deploy/kind/down.sh first to change it)"
	fi
	# Make sure the context kind-csi-topology is in the kubeconfig.
	kind export kubeconfig --name "$CLUSTER"
else
	log "Creating the kind cluster $CLUSTER (1 control plane, 3 workers in zones z1, z2, z3)"
	if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
		kind create cluster --name "$CLUSTER" --config "$SCRIPT_DIR/cluster.yaml" --wait 5m --image "$KIND_NODE_IMAGE"
	else
		echo "(node image: kind's default; set KIND_NODE_IMAGE to a Kubernetes 1.36 kindest/node image to choose it)"
		kind create cluster --name "$CLUSTER" --config "$SCRIPT_DIR/cluster.yaml" --wait 5m
	fi
fi

log "Waiting for the nodes to be Ready"
k wait --for=condition=Ready node --all --timeout=5m

zone_index=0
for node in $WORKERS; do
	zone_index=$((zone_index + 1))
	if ! k get node "$node" >/dev/null 2>&1; then
		die "node $node is missing: the cluster $CLUSTER was not made from deploy/kind/cluster.yaml. Run deploy/kind/down.sh, then this script again."
	fi
	zone=$(k get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')
	if [[ $zone != "z$zone_index" ]]; then
		warn "node $node has $ZONE_KEY='$zone', expected z$zone_index: labelling it"
		k label node "$node" "$ZONE_KEY=z$zone_index" --overwrite
	fi
done

kubelet_version=$(k get node "$CLUSTER-control-plane" -o jsonpath='{.status.nodeInfo.kubeletVersion}' 2>/dev/null || true)
case $kubelet_version in
v1.36.*) echo "Kubernetes $kubelet_version" ;;
*) warn "the cluster runs Kubernetes '${kubelet_version:-unknown}', the project pins 1.36 (csi-topology-scheduler is kube-scheduler v1.36.3): set KIND_NODE_IMAGE to a v1.36 kindest/node image and recreate the cluster if anything misbehaves" ;;
esac

# ---------------------------------------------------------------------------
if [[ ${SKIP_BUILD:-0} == 1 ]]; then
	log "SKIP_BUILD=1: not building the images"
else
	log "Building the images (make image VERSION=$VERSION IMAGE_PLATFORMS=linux/$ARCH; no Docker needed)"
	make -C "$ROOT" image VERSION="$VERSION" IMAGE_PLATFORMS="linux/$ARCH"
fi
# Each tarball holds one image, tagged csi-topology-provisioner/<name>:$VERSION,
# the references of the overlay.
for b in $IMAGES; do
	[[ -f bin/images/$b-$ARCH.tar ]] || die "bin/images/$b-$ARCH.tar not found: run without SKIP_BUILD=1"
done

log "Loading the images into the kind nodes (kind load image-archive)"
for b in $IMAGES; do
	kind load image-archive --name "$CLUSTER" "bin/images/$b-$ARCH.tar"
done

# ---------------------------------------------------------------------------
log "Installing deploy/kubernetes/overlays/mock"
k apply -k deploy/kubernetes/overlays/mock


log "Waiting for the rollouts"
for obj in $WORKLOADS; do
	if ! k -n "$NAMESPACE" rollout status "$obj" --timeout=5m; then
		diagnose_system
		die "$obj did not roll out within 5 minutes"
	fi
done

# ---------------------------------------------------------------------------
log "Waiting for the CSINode entries of $DRIVER on the workers"
csinode_registered() {
	local id
	id=$(k get csinode "$1" -o jsonpath="{.spec.drivers[?(@.name==\"$DRIVER\")].nodeID}" 2>/dev/null) || return 1
	[[ -n $id ]]
}
driver_zone_label() {
	local z
	z=$(k get node "$1" -o jsonpath='{.metadata.labels.topology\.mock\.csi\.example\.com/zone}' 2>/dev/null) || return 1
	[[ -n $z ]]
}
for node in $WORKERS; do
	if ! wait_until 300 csinode_registered "$node"; then
		diagnose_system
		die "no CSINode entry for $DRIVER on $node after 5 minutes (kubectl --context $CONTEXT get csinode $node -o yaml; logs of the csi-node pod on $node)"
	fi
	if ! wait_until 120 driver_zone_label "$node"; then
		die "node $node has no label $DRIVER_ZONE_KEY after 2 minutes (csi-node-publisher logs on $node)"
	fi
	keys=$(k get csinode "$node" -o jsonpath="{.spec.drivers[?(@.name==\"$DRIVER\")].topologyKeys}")
	dz=$(k get node "$node" -o jsonpath='{.metadata.labels.topology\.mock\.csi\.example\.com/zone}')
	kz=$(k get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')
	printf '%-22s registered, topology keys %s, %s=%s\n' "$node" "$keys" "$DRIVER_ZONE_KEY" "$dz"
	if [[ $dz != "$kz" ]]; then
		warn "$node: $DRIVER_ZONE_KEY=$dz but $ZONE_KEY=$kz; cluster.yaml and the overlay's mock-config.yaml disagree"
	fi
done

log "Waiting for the CSIStorageCapacity objects of class $STORAGE_CLASS (one per zone)"
capacity_objects() {
	local n
	n=$(k -n "$NAMESPACE" get csistoragecapacities \
		-o jsonpath="{range .items[?(@.storageClassName==\"$STORAGE_CLASS\")]}{.metadata.name}{\"\\n\"}{end}" 2>/dev/null | grep -c . || true)
	((n >= 3))
}
# csi-provisioner publishes them as soon as the workers have registered the
# driver (new segments) and the class exists.
if ! wait_until 180 capacity_objects; then
	diagnose_system
	die "fewer than 3 CSIStorageCapacity objects for $STORAGE_CLASS after 3 minutes (kubectl --context $CONTEXT -n $NAMESPACE logs deploy/csi-controller -c csi-provisioner)"
fi
k -n "$NAMESPACE" get csistoragecapacities

# ---------------------------------------------------------------------------
log "Applying the StatefulSet web (schedulerName: csi-topology-scheduler, class $STORAGE_CLASS)"
if k -n default get statefulset web >/dev/null 2>&1; then
	existing=$(k -n default get statefulset web -o jsonpath='{.spec.template.spec.schedulerName} {.spec.volumeClaimTemplates[0].spec.storageClassName}')
	if [[ $existing != "csi-topology-scheduler $STORAGE_CLASS" ]]; then
		die "a StatefulSet default/web exists with scheduler and class '$existing' (examples/statefulset.yaml?); its claim template cannot be changed in place. Delete it first: kubectl --context $CONTEXT -n default delete statefulset web && kubectl --context $CONTEXT -n default delete pvc -l app=web"
	fi
fi
k apply -f - <<'EOF'
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports:
    - {name: unused, port: 80}
---
# One replica per zone (required anti-affinity on the zone label), each with
# its own claim of the delayed-binding class csi-zonal, placed by
# csi-topology-scheduler (the CSITopology plugin).
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  serviceName: web
  replicas: 3
  podManagementPolicy: Parallel
  persistentVolumeClaimRetentionPolicy: {whenDeleted: Delete, whenScaled: Delete}
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      schedulerName: csi-topology-scheduler
      terminationGracePeriodSeconds: 5
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector:
                matchLabels: {app: web}
              topologyKey: topology.kubernetes.io/zone
      containers:
        - name: web
          image: busybox:1.36
          command: ["sh", "-c", "echo hello > /data/hello && sleep 3600"]
          volumeMounts:
            - {name: data, mountPath: /data}
  volumeClaimTemplates:
    - metadata:
        name: data
        labels: {app: web}
      spec:
        accessModes: ["ReadWriteOnce"]
        storageClassName: csi-zonal
        resources:
          requests:
            storage: 1Gi
EOF

log "Waiting for the 3 pods of web to be Ready"
if ! k -n default rollout status statefulset/web --timeout=5m; then
	diagnose_web
	die "StatefulSet web not ready within 5 minutes"
fi

# ---------------------------------------------------------------------------
log "Where each claim landed"
fmt='%-12s %-22s %-6s %-42s %s\n'
# shellcheck disable=SC2059 # the format is ours
printf "$fmt" CLAIM NODE ZONE PV "PV NODE AFFINITY ($DRIVER_ZONE_KEY)"
problems=0
seen_zones=" "
for i in 0 1 2; do
	claim=data-web-$i
	node=$(k -n default get pod "web-$i" -o jsonpath='{.spec.nodeName}')
	zone=$(k get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')
	pv=$(k -n default get pvc "$claim" -o jsonpath='{.spec.volumeName}')
	pv_zone=""
	if [[ -n $pv ]]; then
		pv_zone=$(k get pv "$pv" -o jsonpath="{.spec.nodeAffinity.required.nodeSelectorTerms[*].matchExpressions[?(@.key==\"$DRIVER_ZONE_KEY\")].values[*]}")
	fi
	# shellcheck disable=SC2059
	printf "$fmt" "$claim" "$node" "$zone" "${pv:-<unbound>}" "${pv_zone:-<none>}"
	if [[ -z $pv || -z $zone || $pv_zone != "$zone" ]]; then
		problems=$((problems + 1))
	fi
	case $seen_zones in
	*" $zone "*) problems=$((problems + 1)) ;;
	*) seen_zones="$seen_zones$zone " ;;
	esac
done
if ((problems > 0)); then
	warn "expected one replica per zone, each claim bound to a PV whose node affinity is its pod's zone"
fi

log "Mount check: kubectl exec web-0 -- cat /data/hello"
read_hello() {
	local out
	out=$(k -n default exec web-0 -c web -- cat /data/hello 2>/dev/null) || return 1
	[[ $out == hello ]]
}
if wait_until 30 read_hello; then
	k -n default exec web-0 -c web -- cat /data/hello
else
	problems=$((problems + 1))
	warn "web-0 could not read back /data/hello"
	k -n default exec web-0 -c web -- cat /data/hello || true
fi

echo
if ((problems > 0)); then
	die "the quick start finished with $problems problem(s) (deploy/kind/README.md, Troubleshooting)"
fi
cat <<EOF
Done. The cluster is the kubectl context $CONTEXT.
  kubectl --context $CONTEXT get pods,pvc -o wide
  kubectl --context $CONTEXT -n $NAMESPACE get pods,csistoragecapacities
  kubectl --context $CONTEXT -n $NAMESPACE logs deploy/csi-controller -c csi-provisioner
Running this script again rebuilds and reloads the images but does not restart
running pods. To pick up new images, start over (deploy/kind/down.sh, then
deploy/kind/up.sh), or restart the components:
  kubectl --context $CONTEXT -n $NAMESPACE rollout restart deployment,daemonset
(the mock controller keeps its volumes in memory: after a restart of
csi-controller it no longer knows the volumes made before).
Remove everything: deploy/kind/down.sh
EOF
