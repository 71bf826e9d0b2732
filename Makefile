# csi-topology-provisioner build, test and run targets.
SHELL := /bin/bash
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# The Kubernetes release the binaries embed (go.mod's k8s.io/kubernetes), for
# csi-topology-scheduler --version; make image stamps it the same way.
KUBE_VERSION = $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes)
LDFLAGS   = -s -w -X main.version=$(VERSION) -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION)
BINARIES  := $(notdir $(wildcard cmd/*))
# Build tags of every binary (tools/image's imagebuild.BuildTags, the
# Dockerfile's): grpcnotrace leaves gRPC's x/net/trace and html/template
# out, which makes the binaries about 40% smaller (docs/performance.md).
BUILDTAGS := grpcnotrace
GOTESTFLAGS ?=
ARGS      ?=
# make image / make push: platforms, and where push sends the images.
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
REGISTRY  ?=
# The project's license (LICENSE), an SPDX expression for the images' label.
LICENSES  := Apache-2.0
# The images' source label (make image; the Dockerfile's SOURCE default).
IMAGE_SOURCE := https://github.com/csi-topology-provisioner/csi-topology-provisioner
# One build configuration for every step (bin/, go vet, go test, the control
# plane, the images): static and with reproducible paths, so that all of them
# share one build cache.
export CGO_ENABLED := 0
export GOFLAGS += -trimpath
# progress runs a step of `make test` and prints a status line at least every
# 30 s (test/harness/cmd/progress).
PROGRESS  := .cache/tools/progress

.PHONY: all build test unit lint run clean image push controlplane fuzz bench chaos conformance

all: build

## build: all binaries into bin/, static, version from git; a status line at least every 30 s (the first build
## compiles the Kubernetes libraries: about 8 minutes on 2 cores)
build: $(PROGRESS)
	@mkdir -p bin
	@$(PROGRESS) -label "build bin/" -packages -- $(GO) build -v -tags '$(BUILDTAGS)' -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINARIES))

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

$(PROGRESS): $(wildcard test/harness/cmd/progress/*.go)
	@mkdir -p $(dir $@)
	@$(GO) build -o $@ ./test/harness/cmd/progress

## controlplane: build (or find cached) etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
## upstream external-provisioner, and kubelet, containerd and the CNI plugins of the real nodes
controlplane: $(PROGRESS)
	@$(PROGRESS) -label "control plane" -- $(GO) run ./test/harness/cmd/controlplane

# go test -p 4: the e2e packages mostly wait on their control planes, and a
# package's test run holds one of go test's -p slots; with the default (one per
# core) two long e2e runs would stop every other package from compiling.
## test: everything a change must pass (lint, unit tests with fuzz seeds, csi-sanity, e2e), with progress lines
test: $(PROGRESS)
	@echo "==> [1/6] Go modules (the first run downloads them)"
	@$(PROGRESS) -label "modules" -- $(GO) mod download
	@cd test/harness/controlplane/k8s && ../../../../$(PROGRESS) -label "modules of the control plane" -- $(GO) mod download
	@cd test/harness/kubeletnode/mod && ../../../../$(PROGRESS) -label "modules of the real nodes' runtime" -- $(GO) mod download
	@cd tools/dockerfile && ../../$(PROGRESS) -label "modules of the Dockerfile check" -- $(GO) mod download
	@cd test/manifests/oldkustomize && ../../../$(PROGRESS) -label "modules of the oldest kustomize" -- $(GO) mod download
	@echo "==> [2/6] gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@echo "==> [3/6] build bin/ (the first run compiles Kubernetes libraries: about 6 minutes on 2 cores)"
	@mkdir -p bin
	@$(PROGRESS) -label "build bin/" -packages -- $(GO) build -v -tags '$(BUILDTAGS)' -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINARIES))
	@echo "==> [4/6] control plane, upstream external-provisioner, kubelet and containerd (built once per go.sum and Go version, cached in the user cache dir)"
	@$(PROGRESS) -label "control plane" -- $(GO) run ./test/harness/cmd/controlplane
	@echo "==> [5/6] go vet (packages without tests; go test vets the others)"
	@$(PROGRESS) -label "go vet" -- $(GO) vet $$($(GO) list -f '{{if not (or .TestGoFiles .XTestGoFiles)}}{{.ImportPath}}{{end}}' ./...)
	@echo "==> [6/6] go test with every go vet check (one control plane per e2e package, the binaries of bin/; full log in .test-output.log)"
	@CSI_TOPOLOGY_TEST_BIN_DIR=$(CURDIR)/bin $(PROGRESS) -label "go test" -test -log .test-output.log -every 60s -- $(GO) test -json -count=1 -vet=all -p 4 -timeout 40m -ldflags='-s -w' $(GOTESTFLAGS) ./...

## fuzz: run every fuzz target for FUZZTIME each (make test runs only their seeds); a failure leaves its
## input in the package's testdata/fuzz/, to be checked in as a seed once fixed
FUZZTIME ?= 30s
fuzz:
	@set -e; for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' pkg mock-driver cmd internal 2>/dev/null | xargs -n1 dirname | sort -u); do \
	  for target in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "==> $$target (./$$pkg, $(FUZZTIME))"; \
	    out=$$($(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./$$pkg 2>&1) || { echo "$$out"; exit 1; }; \
	    echo "$$out" | tail -n 1; \
	  done; \
	done

## bench: csi-provisioner measured as a whole process on the local control plane (test/harness/cmd/bench, docs/performance.md):
## SIZES (fake nodes, comma-separated), SCENARIOS (backlog,delete,burst,wffc,nodes,node), REPS, CLAIMS, COMPARE=/path/to/other/csi-provisioner
## (run alternately with ours, ratios printed), INSTANCES (nodes: csi-provisioner --node-deployment processes, at most one per node;
## default 100), NODE_ARGS (nodes: extra flags of our instances), BENCH_ARGS (more flags of test/harness/cmd/bench, e.g.
## --bind-through-contender: ours with --bind-through as a third contender); JSON and table in .cache/bench/
SIZES     ?= 3
SCENARIOS ?= backlog,delete,burst
REPS      ?= 2
CLAIMS    ?= 500
COMPARE   ?=
INSTANCES ?=
NODE_ARGS ?=
BENCH_ARGS ?=
bench: build
	@$(GO) build -ldflags '-s -w' -o .cache/tools/bench ./test/harness/cmd/bench
	.cache/tools/bench --bin-dir=bin --sizes='$(SIZES)' --scenarios='$(SCENARIOS)' --reps=$(REPS) --claims=$(CLAIMS) \
		$(if $(COMPARE),--compare='$(COMPARE)') $(if $(INSTANCES),--instances=$(INSTANCES)) $(if $(NODE_ARGS),--node-args='$(NODE_ARGS)') $(BENCH_ARGS)

## chaos: the chaos suite at full size (test/chaos, docs/operations.md "make chaos"): CLAIMS claims over
## DURATION under every fault, then the leak and stuck-claim invariants; SEED=0 takes one from the clock, the
## run prints it (make chaos SEED=42 CLAIMS=500); BIND_THROUGH=1 runs csi-provisioner with --bind-through
SEED     ?= 0
DURATION ?= 7m
BIND_THROUGH ?=
chaos: build
	CSI_TOPOLOGY_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test ./test/chaos/ -run '^TestChaos$$' -count=1 -v -timeout 30m -ldflags='-s -w' \
		-args -chaos.full -chaos.seed=$(SEED) -chaos.claims=$(CLAIMS) -chaos.duration=$(DURATION) $(if $(BIND_THROUGH),-chaos.bind-through)

## conformance: the drop-in promise at full size: the differential harness (test/conformance) verbosely, the
## corpus through ours and upstream external-provisioner v6.3.0 with every case's observation printed (REPEAT=n
## runs every case n times), then test/e2eswap swapping upstream for csi-provisioner and back with 200 claims per
## group (docs/operations.md "Rolling back to upstream")
REPEAT ?= 1
conformance: build
	CSI_TOPOLOGY_TEST_BIN_DIR=$(CURDIR)/bin CONFORMANCE_REPEAT=$(REPEAT) $(GO) test ./test/conformance/ -count=1 -v -timeout 40m -ldflags='-s -w'
	CSI_TOPOLOGY_SWAP_CLAIMS=200 CSI_TOPOLOGY_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test ./test/e2eswap -count=1 -v -timeout 40m -ldflags='-s -w'

## run: the main job on the local control plane (see README); NODES=kubelet runs it
## on 3 real nodes (as root; docs/real-nodes.md). Ctrl-C, or SIGINT
## or SIGTERM to make alone, stops it and cleans up. make execs the program (no
## `go run` in between) so that it is make's child: make passes SIGTERM on to
## it but not SIGINT, so the program watches make's signal handlers in /proc
## and stops when make handles a fatal signal (test/harness/cmd/run/stop.go).
run: build
	@$(PROGRESS) -label "build bin/run" -packages -- $(GO) build -v -o bin/run ./test/harness/cmd/run
	exec bin/run --bin-dir=bin $(if $(NODES),--nodes=$(NODES)) $(ARGS)

## image: the images for IMAGE_PLATFORMS without a container engine (tools/image): bin/images/<binary>/ (OCI layout, multi-platform index) and bin/images/<binary>-<arch>.tar (docker load), tagged and stamped with VERSION
# Every date in the images is SOURCE_DATE_EPOCH, or the commit time: two builds of a commit are identical.
image:
	$(GO) run ./tools/image build -out bin/images -version '$(VERSION)' -ldflags '$(LDFLAGS)' \
		-platforms '$(IMAGE_PLATFORMS)' -epoch "$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)}" \
		-revision "$$(git rev-parse HEAD 2>/dev/null)" -licenses '$(LICENSES)' -source '$(IMAGE_SOURCE)' $(BINARIES)

## push: the multi-platform indexes of bin/images/ to REGISTRY/<binary>:VERSION (builds them first)
push:
	@if [ -z '$(REGISTRY)' ]; then echo "usage: make push REGISTRY=registry.example.com/team [VERSION=v0.1.0]"; exit 1; fi
	$(MAKE) image VERSION='$(VERSION)'
	$(GO) run ./tools/image push -out bin/images -registry '$(REGISTRY)' -version '$(VERSION)' $(BINARIES)

clean:
	rm -rf bin .cache .test-output.log
	@echo "the control plane binaries stay cached in $${XDG_CACHE_HOME:-$$HOME/.cache}/csi-topology-provisioner; remove that directory to rebuild them"
