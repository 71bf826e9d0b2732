# csi-topology-provisioner build, test and run targets.
SHELL := /bin/bash
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# The Kubernetes release the binaries embed (go.mod's k8s.io/kubernetes), for
# csi-topology-scheduler --version; the Dockerfile stamps it the same way.
KUBE_VERSION = $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes)
LDFLAGS   = -s -w -X main.version=$(VERSION) -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION)
BINARIES  := $(notdir $(wildcard cmd/*))
GOTESTFLAGS ?=
ARGS      ?=

.PHONY: all build test unit lint run clean image

all: build

## build: all binaries into bin/, static, version from git
build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINARIES))

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## test: everything a change must pass (lint, unit tests with fuzz seeds, csi-sanity, e2e)
test: lint build
	$(GO) test -count=1 -timeout 40m $(GOTESTFLAGS) ./... 2>&1 | tee .test-output.log; exit $${PIPESTATUS[0]}

## run: the main job on the local control plane (see README); Ctrl-C, or SIGINT
## or SIGTERM to make, stops it and cleans up. make execs the program (no
## `go run` in between) so that it is make's child.
run: build
	CGO_ENABLED=0 $(GO) build -o bin/run ./test/cmd/run
	exec bin/run --bin-dir=bin $(ARGS)

## image: container images of every binary, tagged and stamped (--version) with VERSION (needs a Docker engine)
image:
	for b in $(BINARIES); do docker build --build-arg VERSION=$(VERSION) --target $$b -t csi-topology-provisioner/$$b:$(VERSION) . || exit 1; done

clean:
	rm -rf bin .cache .test-output.log
