package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerui"
	"github.com/moby/buildkit/solver/pb"
	digest "github.com/opencontainers/go-digest"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
)

// Output is what the command prints.
type Output struct {
	// Stages are the stages of the Dockerfile in order, as parsed.
	Stages []Stage `json:"stages"`
	// Targets are the evaluated targets, by name.
	Targets map[string]Target `json:"targets"`
}

// Stage is one FROM ... AS name and its COPY instructions, unexpanded.
type Stage struct {
	Name     string `json:"name"`
	Base     string `json:"base"`
	Platform string `json:"platform,omitempty"`
	Copies   []Copy `json:"copies,omitempty"`
}

// Copy is a COPY instruction.
type Copy struct {
	From    string   `json:"from,omitempty"`
	Sources []string `json:"sources"`
	Dest    string   `json:"dest"`
	Chown   string   `json:"chown,omitempty"`
	Chmod   string   `json:"chmod,omitempty"`
}

// Target is what building one target gives and does.
type Target struct {
	// OS, Architecture and Config are the image's, as BuildKit writes them.
	OS           string               `json:"os"`
	Architecture string               `json:"architecture"`
	Config       ocispecs.ImageConfig `json:"config"`
	// Pulls are the images the build resolves, as BuildKit names them.
	Pulls []string `json:"pulls"`
	// Runs are the processes the build runs (every RUN of every stage the
	// target needs).
	Runs []Run `json:"runs"`
	// Warnings are the frontend's lint warnings.
	Warnings []string `json:"warnings,omitempty"`
	// Error is why the frontend could not convert the target (a target
	// that is not a stage, say); the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// parseStages parses the Dockerfile into stages with the frontend's parser.
func parseStages(dt []byte) ([]Stage, error) {
	res, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing instructions: %w", err)
	}
	var out []Stage
	for _, s := range stages {
		st := Stage{Name: s.Name, Base: s.BaseName, Platform: s.Platform}
		for _, c := range s.Commands {
			if cp, ok := c.(*instructions.CopyCommand); ok {
				st.Copies = append(st.Copies, Copy{
					From: cp.From, Sources: cp.SourcePaths, Dest: cp.DestPath, Chown: cp.Chown, Chmod: cp.Chmod,
				})
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// evaluate converts the Dockerfile for target with BuildKit's frontend, as
// `docker buildx build --target <target> --platform <tp>` on a tp machine
// would, and reads the image config and the processes of the result.
func evaluate(ctx context.Context, dt []byte, target string, tp, bp ocispecs.Platform, args map[string]string) (Target, error) {
	resolver := &fakeResolver{}
	var out Target
	res, err := dockerfile2llb.Dockerfile2LLB(ctx, dt, dockerfile2llb.ConvertOpt{
		Config: dockerui.Config{
			BuildArgs:       args,
			Target:          target,
			TargetPlatforms: []ocispecs.Platform{tp},
			BuildPlatforms:  []ocispecs.Platform{bp},
		},
		TargetPlatform: &tp,
		MetaResolver:   resolver,
		Warn: func(rule, _, _, msg string, _ []parser.Range) {
			out.Warnings = append(out.Warnings, rule+": "+msg)
		},
	})
	if err != nil {
		return out, err
	}
	out.OS, out.Architecture, out.Config = res.Image.OS, res.Image.Architecture, res.Image.Config.ImageConfig
	out.Pulls = resolver.refs()
	def, err := res.State.Marshal(ctx)
	if err != nil {
		return out, err
	}
	for _, dt := range def.Def {
		var op pb.Op
		if err := op.UnmarshalVT(dt); err != nil {
			return out, err
		}
		exec := op.GetExec()
		if exec == nil {
			continue
		}
		r, err := newRun(exec.GetMeta())
		if err != nil {
			return out, err
		}
		out.Runs = append(out.Runs, r)
	}
	return out, nil
}

// fakeResolver answers the frontend's questions about base images without a
// registry: an image with an empty config for the platform asked. It
// records what was asked.
type fakeResolver struct {
	mu   sync.Mutex
	seen []string
}

// ResolveImageConfig implements llb.ImageMetaResolver.
func (r *fakeResolver) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	r.mu.Lock()
	r.seen = append(r.seen, ref)
	r.mu.Unlock()
	img := ocispecs.Image{Platform: ocispecs.Platform{OS: "linux", Architecture: "amd64"}}
	if opt.ImageOpt != nil && opt.ImageOpt.Platform != nil {
		img.Platform = *opt.ImageOpt.Platform
	}
	dt, err := json.Marshal(img)
	if err != nil {
		return "", "", nil, err
	}
	return ref, digest.FromBytes(dt), dt, nil
}

func (r *fakeResolver) refs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.seen)
	slices.Sort(out)
	return slices.Compact(out)
}
