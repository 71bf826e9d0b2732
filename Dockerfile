# Multi-stage build: one target per binary, each a distroless static image.
#   docker build --build-arg VERSION=v0.1.0 --target csi-provisioner -t csi-provisioner .
# VERSION is what --version prints (the build context has no .git to ask).
# (`make image` builds them all with VERSION from git; it needs a Docker engine.)
FROM golang:1.26 AS builder
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# The same -ldflags as the Makefile's LDFLAGS: the project's version, and the
# Kubernetes release (go.mod's k8s.io/kubernetes) for csi-topology-scheduler.
RUN KUBE_VERSION=$(go list -m -f '{{.Version}}' k8s.io/kubernetes) && \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}" \
      -o /out/ ./cmd/...

# The sidecars and the mock driver run as root, like the upstream CSI
# sidecars: they connect to the driver's unix socket, which a driver running
# as root creates without write permission for other users. The scheduler
# and the extender touch no socket and run as non-root.
FROM gcr.io/distroless/static:latest AS csi-provisioner
COPY --from=builder /out/csi-provisioner /csi-provisioner
ENTRYPOINT ["/csi-provisioner"]

FROM gcr.io/distroless/static:latest AS mock-driver
COPY --from=builder /out/mock-driver /mock-driver
ENTRYPOINT ["/mock-driver"]

FROM gcr.io/distroless/static:latest AS csi-node-publisher
COPY --from=builder /out/csi-node-publisher /csi-node-publisher
ENTRYPOINT ["/csi-node-publisher"]

FROM gcr.io/distroless/static:nonroot AS csi-topology-scheduler
COPY --from=builder /out/csi-topology-scheduler /csi-topology-scheduler
ENTRYPOINT ["/csi-topology-scheduler"]

FROM gcr.io/distroless/static:nonroot AS csi-scheduler-extender
COPY --from=builder /out/csi-scheduler-extender /csi-scheduler-extender
ENTRYPOINT ["/csi-scheduler-extender"]
