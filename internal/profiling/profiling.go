// Package profiling serves Go's net/http/pprof on a binary's HTTP endpoint
// (--enable-pprof, as the kubernetes-csi sidecars have it).
package profiling

import (
	"net/http"
	"net/http/pprof"
)

// Register serves net/http/pprof under /debug/pprof/ on mux.
func Register(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
