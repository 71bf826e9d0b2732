# The project's images, one target per binary of cmd/, the same images as
# `make image` (tools/image) builds without a container engine: a static
# binary (CGO_ENABLED=0, -trimpath, the Makefile's -ldflags) on no base image
# but the base files of tools/image (/etc/passwd and /etc/group with the
# nonroot user 65532, /home/nonroot, /tmp), entrypoint /<binary>, the
# org.opencontainers.image.* labels, and the user: root (0:0) for the
# sidecars that dial a CSI driver's socket (csi-provisioner and
# csi-node-publisher, as upstream external-provisioner's image, which runs as
# root), nonroot (65532:65532) for the others (imagebuild.UserOf).
#
#   docker buildx build --target csi-provisioner --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t registry.example.com/csi-provisioner:v0.1.0 .
#
# test/images TestDockerfile evaluates this file with BuildKit's own frontend
# and holds it to what `make image` builds; docs/install.md#images.

# The Go release the builder compiles with: go.mod's go line (major.minor;
# the image carries that release's latest patch).
ARG GO_VERSION=1.26
# What --version prints and the version label (the build context has no .git
# to ask); REVISION (a commit) and CREATED (RFC 3339) are labels only.
ARG VERSION=devel
ARG REVISION=""
ARG CREATED=""
ARG SOURCE=https://github.com/csi-topology-provisioner/csi-topology-provisioner
ARG LICENSES=Apache-2.0

# The builder runs on the build machine's platform and cross-compiles for
# the target's (TARGETOS, TARGETARCH): no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The base files, as the tar stream of make image's base layer; tar runs as
# root, so it keeps the owners (home/nonroot is 65532's) and modes (/tmp 1777).
RUN mkdir /rootfs && go run ./tools/image rootfs | tar -x -p --same-owner -f - -C /rootfs
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
# The Makefile's BUILDTAGS (gRPC without x/net/trace: smaller binaries) and
# LDFLAGS: the project's version, and the Kubernetes release (go.mod's
# k8s.io/kubernetes) that csi-topology-scheduler --version prints.
RUN KUBE_VERSION="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" && \
    CGO_ENABLED=0 GOOS="${TARGETOS}" GOARCH="${TARGETARCH}" go build -trimpath -tags grpcnotrace \
      -ldflags "-s -w -X main.version=${VERSION} -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}" \
      -o /out/ ./cmd/...

# What every image shares: the base files and the labels.
FROM scratch AS runtime
COPY --from=builder /rootfs/ /
ARG VERSION
ARG REVISION
ARG CREATED
ARG SOURCE
ARG LICENSES
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}"
WORKDIR /

# The sidecars that connect to a CSI driver's unix socket run as root: most
# drivers run as root and create their socket 0755, which only root may
# connect to (docs/install.md#the-images-users).
FROM runtime AS runtime-root
USER 0:0

# The others talk to the API server or serve HTTP, or create their socket.
FROM runtime AS runtime-nonroot
USER 65532:65532

FROM runtime-root AS csi-node-publisher
COPY --from=builder /out/csi-node-publisher /csi-node-publisher
LABEL org.opencontainers.image.title="csi-node-publisher"
ENTRYPOINT ["/csi-node-publisher"]

FROM runtime-nonroot AS csi-node-router
COPY --from=builder /out/csi-node-router /csi-node-router
LABEL org.opencontainers.image.title="csi-node-router"
ENTRYPOINT ["/csi-node-router"]

FROM runtime-nonroot AS csi-topology-scheduler
COPY --from=builder /out/csi-topology-scheduler /csi-topology-scheduler
LABEL org.opencontainers.image.title="csi-topology-scheduler"
ENTRYPOINT ["/csi-topology-scheduler"]

FROM runtime-nonroot AS csi-scheduler-extender
COPY --from=builder /out/csi-scheduler-extender /csi-scheduler-extender
LABEL org.opencontainers.image.title="csi-scheduler-extender"
ENTRYPOINT ["/csi-scheduler-extender"]

FROM runtime-nonroot AS mock-driver
COPY --from=builder /out/mock-driver /mock-driver
LABEL org.opencontainers.image.title="mock-driver"
ENTRYPOINT ["/mock-driver"]

FROM runtime-nonroot AS kubectl-csi_topology
COPY --from=builder /out/kubectl-csi_topology /kubectl-csi_topology
LABEL org.opencontainers.image.title="kubectl-csi_topology"
ENTRYPOINT ["/kubectl-csi_topology"]

# The last stage, what a build without --target gives: the provisioner.
FROM runtime-root AS csi-provisioner
COPY --from=builder /out/csi-provisioner /csi-provisioner
LABEL org.opencontainers.image.title="csi-provisioner"
ENTRYPOINT ["/csi-provisioner"]
