// Package images builds the project's images as `make image` does
// (tools/image/imagebuild, the Makefile's LDFLAGS), for the host's
// architecture only (linux/amd64 on CI) and reusing the go command's build
// cache, and checks what a vendor pulls: each image's config (entrypoint,
// user: root for the sidecars that dial a driver socket, else 65532;
// labels), its layers (exactly the base files and the binary:
// no shell), the binary extracted from the layers and run with --version
// and --help, and that two builds into two directories give the same
// digests. It also holds the repository's Dockerfile to the same images
// without building it: tools/dockerfile evaluates it with BuildKit's own
// frontend (TestDockerfile).
package images
