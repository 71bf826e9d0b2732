package imagebuild

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images' users, as "uid:gid" in the image config (UserOf).
const (
	// RootUser is the user of the images that dial a CSI driver's socket
	// (DriverSocketClients).
	RootUser = "0:0"
	// NonRootUID is distroless's nonroot, the user of the other images.
	NonRootUID  = 65532
	NonRootUser = "65532:65532"
)

// DriverSocketClients are the binaries that connect to a CSI driver's unix
// socket. Their images run as root, as upstream external-provisioner's
// image does (distroless static, no USER): most drivers run as root and
// create their socket 0755 in a shared emptyDir, which only root may
// connect to, so a vendor who swaps only the image keeps a sidecar that
// connects. The other binaries talk to the API server or serve HTTP only,
// and the mock driver creates its socket: they run as nonroot.
var DriverSocketClients = []string{"csi-node-publisher", "csi-provisioner"}

// UserOf is the image user of binary: RootUser for DriverSocketClients,
// NonRootUser for the others.
func UserOf(binary string) string {
	if slices.Contains(DriverSocketClients, binary) {
		return RootUser
	}
	return NonRootUser
}

// BaseImage is what the images are built on: nothing ("scratch" in a
// Dockerfile), only the base files (WriteBaseFiles) and the binary.
const BaseImage = "scratch"

// Path is the images' PATH: BuildKit's default for an image FROM scratch,
// and distroless's.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// OCI annotation keys the images carry as labels (and the index as
// annotations).
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelVersion  = "org.opencontainers.image.version"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelCreated  = "org.opencontainers.image.created"
	LabelTitle    = "org.opencontainers.image.title"
)

// Config says what to build and how to stamp it. Build reads it only.
type Config struct {
	// Root is the module root; each binary is the package ./cmd/<binary>.
	Root string
	// Binaries are the names of the directories under cmd/ to build, one
	// image each.
	Binaries []string
	// Platforms to build for; the first is the one a caller that needs one
	// (a test) uses. Only OS and Architecture are used.
	Platforms []v1.Platform
	// Repository prefixes the image names: <Repository>/<binary>:<Version>.
	Repository string
	// Version is the tag, the version label and what main.version is
	// stamped with (LDFlags carries -X main.version=<Version>).
	Version string
	// LDFlags are passed to go build -ldflags as they are.
	LDFlags string
	// Revision (a commit), Source (a URL) and Licenses (an SPDX expression)
	// become labels; an empty one is left out.
	Revision, Source, Licenses string
	// Created is every timestamp of the images: config, history and tar
	// entries (usually SOURCE_DATE_EPOCH or the commit time).
	Created time.Time
	// OutDir receives <binary>/ (OCI layout) and <binary>-<arch>.tar.
	OutDir string
	// GoCommand is the go command; "go" if empty.
	GoCommand string
	// RootBinaries run as RootUser whatever UserOf says: the test lab's
	// stand-in for upstream's node-driver-registrar, whose image runs as
	// root (test/harness/kubeletnode). make image sets none.
	RootBinaries []string
}

// Reference is the name and tag of the image of binary: the name `docker
// load` and `kind load image-archive` give it.
func Reference(repository, binary, version string) string {
	return repository + "/" + binary + ":" + version
}

// ParsePlatforms parses "linux/amd64,linux/arm64".
func ParsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		goos, arch, ok := strings.Cut(f, "/")
		if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", f)
		}
		out = append(out, v1.Platform{OS: goos, Architecture: arch})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platform in %q", s)
	}
	return out, nil
}

// labels are the image labels of binary.
func (c *Config) labels(binary string) map[string]string {
	l := map[string]string{
		LabelTitle:   binary,
		LabelVersion: c.Version,
		LabelCreated: c.Created.UTC().Format(time.RFC3339),
	}
	for k, v := range map[string]string{LabelSource: c.Source, LabelRevision: c.Revision, LabelLicenses: c.Licenses} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

func (c *Config) validate() error {
	switch {
	case c.Root == "" || c.OutDir == "":
		return fmt.Errorf("root and output directory must be set")
	case len(c.Binaries) == 0 || len(c.Platforms) == 0:
		return fmt.Errorf("no binary or no platform to build")
	case c.Repository == "" || c.Version == "":
		return fmt.Errorf("repository and version must be set")
	}
	return nil
}
