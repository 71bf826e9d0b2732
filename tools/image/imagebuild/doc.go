// Package imagebuild builds the project's container images without a
// container engine: it compiles the binaries with the go command for each
// platform, wraps each one in a two-layer image (a base layer with the
// passwd and group entries of the nonroot user and /tmp, then the binary),
// and writes, per binary, an OCI image layout holding a multi-platform index
// and one `docker load` tarball per platform. Push sends such an index to a
// registry.
//
// Builds are reproducible: every tar entry, config and history timestamp is
// Config.Created, tar entries are sorted with fixed owners and modes, and
// layers are compressed with a fixed gzip level and an empty gzip header, so
// two builds of the same sources with the same Config give the same digests.
package imagebuild
