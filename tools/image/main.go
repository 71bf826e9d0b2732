// Command image builds the project's container images without a container
// engine (`make image`) and pushes them (`make push`); see
// tools/image/imagebuild. rootfs writes the images' base files as a tar
// stream to stdout, for the Dockerfile to unpack into its FROM scratch images.
//
//	image build -out bin/images -version v0.1.0 -epoch 1700000000 csi-provisioner mock-driver
//	image push -out bin/images -registry registry.example.com/team -version v0.1.0 csi-provisioner
//	image rootfs [-epoch 1700000000] | tar -x -p --same-owner -f - -C /rootfs
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || (args[0] != "build" && args[0] != "push" && args[0] != "rootfs") {
		return fmt.Errorf("usage: image build|push [flags] BINARY... | image rootfs [-epoch N]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())

	var (
		cfg       imagebuild.Config
		platforms string
		epoch     int64
		registry  string
	)
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.StringVar(&cfg.OutDir, "out", "bin/images", "Output directory: <binary>/ (OCI layout) and <binary>-<arch>.tar.")
	fs.StringVar(&cfg.Version, "version", "", "Tag, version label and main.version of the images.")
	fs.StringVar(&cfg.Repository, "repository", "csi-topology-provisioner", "Name prefix of the images: <repository>/<binary>:<version>.")
	fs.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "Platforms to build, comma-separated os/arch.")
	fs.StringVar(&cfg.LDFlags, "ldflags", "", "go build -ldflags (the Makefile's LDFLAGS).")
	fs.Int64Var(&epoch, "epoch", 0, "Date of every timestamp in the images, in seconds since 1970 (SOURCE_DATE_EPOCH, or the commit time).")
	fs.StringVar(&cfg.Revision, "revision", "", "Commit, for the org.opencontainers.image.revision label.")
	fs.StringVar(&cfg.Source, "source", "", "Source URL, for the org.opencontainers.image.source label.")
	fs.StringVar(&cfg.Licenses, "licenses", "", "SPDX expression for the org.opencontainers.image.licenses label; left out when empty.")
	fs.StringVar(&registry, "registry", "", "push: registry and path prefix, e.g. registry.example.com/team.")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	binaries := fs.Args()
	switch {
	case args[0] == "rootfs" && len(binaries) != 0:
		return fmt.Errorf("rootfs takes no argument, got %q", binaries)
	case args[0] == "rootfs":
		return imagebuild.WriteBaseFiles(os.Stdout, time.Unix(epoch, 0).UTC())
	}
	if args[0] == "push" {
		if registry == "" || cfg.Version == "" {
			return fmt.Errorf("push needs -registry and -version")
		}
		_, err := imagebuild.Push(ctx, cfg.OutDir, registry, cfg.Version, binaries)
		return err
	}

	var err error
	if cfg.Platforms, err = imagebuild.ParsePlatforms(platforms); err != nil {
		return err
	}
	if cfg.Root, err = os.Getwd(); err != nil {
		return err
	}
	if !filepath.IsAbs(cfg.OutDir) {
		cfg.OutDir = filepath.Join(cfg.Root, cfg.OutDir)
	}
	cfg.Created = time.Unix(epoch, 0).UTC()
	cfg.Binaries = binaries
	start := time.Now()
	results, err := imagebuild.Build(ctx, cfg)
	if err != nil {
		return err
	}
	return printResults(results, time.Since(start))
}

// printResults prints one line per image and platform: what `make image`
// made and how big it is.
func printResults(results []imagebuild.Result, took time.Duration) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IMAGE\tPLATFORM\tCOMPRESSED\tUNCOMPRESSED\tDIGEST\tTARBALL")
	for _, r := range results {
		for _, pi := range r.Images {
			fmt.Fprintf(w, "%s\t%s\t%.1f MiB\t%.1f MiB\t%s\t%s\n", r.Reference, pi.Platform, mib(pi.Compressed), mib(pi.Uncompressed), pi.Digest, pi.Tarball)
		}
		fmt.Fprintf(w, "%s\tindex\t\t\t%s\t%s\n", r.Reference, r.Index, r.Layout)
	}
	fmt.Fprintf(w, "built in %s\n", took.Round(100*time.Millisecond))
	return w.Flush()
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
