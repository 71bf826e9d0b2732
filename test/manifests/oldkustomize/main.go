// Command oldkustomize renders kustomizations with the oldest kustomize the
// project supports: the one in kubectl 1.27, kustomize v5.0.1
// (sigs.k8s.io/kustomize/api v0.13.2, kyaml v0.14.1, as k8s.io/kubectl
// v0.27.0 requires them; docs/install.md). It is a module of its own so that
// the project's go.mod keeps its current kustomize; test/manifests runs it
// (`go run .` here) on every kustomization and compares its objects with
// the current library's.
//
// It prints one JSON object: the kustomize/api version it was built with
// and, for every directory argument in order, the rendered YAML or the
// error (a panic of kustomize included).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// output is what the command prints.
type output struct {
	// API is the version of sigs.k8s.io/kustomize/api built in.
	API     string   `json:"api"`
	Results []result `json:"results"`
}

// result is the rendering of one kustomization directory.
type result struct {
	Dir   string `json:"dir"`
	YAML  string `json:"yaml,omitempty"`
	Error string `json:"error,omitempty"`
}

// render builds dir as `kustomize build` does. Old kustomize releases panic
// on some inputs; that is reported as the directory's error.
func render(dir string) (r result) {
	r.Dir = dir
	defer func() {
		if p := recover(); p != nil {
			r.YAML, r.Error = "", fmt.Sprintf("kustomize panicked: %v", p)
		}
	}()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	data, err := res.AsYaml()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.YAML = string(data)
	return r
}

// apiVersion is the version of sigs.k8s.io/kustomize/api in the binary.
func apiVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "sigs.k8s.io/kustomize/api" {
				return m.Version
			}
		}
	}
	return "unknown"
}

func main() {
	out := output{API: apiVersion()}
	for _, dir := range os.Args[1:] {
		out.Results = append(out.Results, render(dir))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
