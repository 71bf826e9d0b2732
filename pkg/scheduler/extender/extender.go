// Package extender serves the scheduler core (package scheduler) as an HTTP
// kube-scheduler extender: the "filter" and "prioritize" verbs with the wire
// types of k8s.io/kube-scheduler/extender/v1, nodeCacheCapable (the scheduler
// sends node names; nodes come from a lister).
package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 8 << 20

// Core is the part of scheduler.Core the extender calls; safe for
// concurrent use.
type Core interface {
	PodVolumes(pod *v1.Pod) (*scheduler.PodVolumes, error)
	Filter(podVols *scheduler.PodVolumes, node *v1.Node) *scheduler.Status
	Score(podVols *scheduler.PodVolumes, node *v1.Node) int64
}

// Observer is told about each answered request, for metrics; may be nil.
type Observer interface {
	// Observe records an answered request: its verb, HTTP code and how long
	// it took.
	Observe(verb string, code int, d time.Duration)
	// Rejected records a node the filter rejected, by reason.
	Rejected(reason scheduler.Reason)
}

// Server is the extender's HTTP handler.
type Server struct {
	core     Core
	nodes    corelisters.NodeLister
	logger   klog.Logger
	observer Observer
}

// New returns the handler: POST /filter, POST /prioritize.
func New(core Core, nodes corelisters.NodeLister, logger klog.Logger, observer Observer) *Server {
	return &Server{core: core, nodes: nodes, logger: logger, observer: observer}
}

// Register adds the verbs to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /filter", s.filter)
	mux.HandleFunc("POST /prioritize", s.prioritize)
}

func (s *Server) observe(verb string, code int, start time.Time) {
	if s.observer != nil {
		s.observer.Observe(verb, code, time.Since(start))
	}
}

func (s *Server) rejected(reason scheduler.Reason) {
	if s.observer != nil {
		s.observer.Rejected(reason)
	}
}

// readArgs decodes a bounded ExtenderArgs body; a malformed one is a 400.
func (s *Server) readArgs(w http.ResponseWriter, r *http.Request, verb string, start time.Time) (*extenderv1.ExtenderArgs, bool) {
	var args extenderv1.ExtenderArgs
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	err := dec.Decode(&args)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err == nil && args.Pod == nil {
		err = errors.New("no pod")
	}
	if err != nil {
		code := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			code = http.StatusRequestEntityTooLarge
		}
		http.Error(w, fmt.Sprintf("malformed %s request: %v", verb, err), code)
		s.observe(verb, code, start)
		return nil, false
	}
	return &args, true
}

// nodeNames returns the candidate node names of a request.
func nodeNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	var out []string
	if args.Nodes != nil {
		for _, n := range args.Nodes.Items {
			out = append(out, n.Name)
		}
	}
	return out
}

func (s *Server) filter(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	args, ok := s.readArgs(w, r, "filter", start)
	if !ok {
		return
	}
	res := extenderv1.ExtenderFilterResult{
		FailedNodes:                extenderv1.FailedNodesMap{},
		FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
	}
	names := nodeNames(args)
	podVols, err := s.podVolumes(r.Context(), args.Pod)
	switch {
	case errors.Is(err, scheduler.ErrClaimNotFound):
		// Not an error: kube-scheduler skips an ignorable extender that
		// answers with one, and would place the pod with none of these
		// checks. Every node fails, retriably: the pod is tried again.
		for _, name := range names {
			res.FailedNodes[name] = err.Error()
		}
		res.NodeNames = &[]string{}
		s.logger.V(2).Info("Claim not in the extender's cache; every node rejected for now", "pod", klog.KObj(args.Pod), "err", err)
	case err != nil:
		res.Error = err.Error()
	case podVols == nil:
		res.NodeNames = &names // not our pod: everything passes
	default:
		fits := []string{}
		for _, name := range names {
			node, err := s.nodes.Get(name)
			if err != nil {
				res.FailedNodes[name] = fmt.Sprintf("node %s not known to the extender yet", name)
				continue
			}
			st := s.core.Filter(podVols, node)
			switch {
			case st == nil:
				fits = append(fits, name)
			case st.Unresolvable:
				res.FailedAndUnresolvableNodes[name] = st.String()
				s.rejected(st.Reason)
			default:
				res.FailedNodes[name] = st.String()
				s.rejected(st.Reason)
			}
		}
		res.NodeNames = &fits
		s.logger.V(4).Info("Filtered", "pod", klog.KObj(args.Pod), "fits", len(fits),
			"failed", len(res.FailedNodes), "unresolvable", len(res.FailedAndUnresolvableNodes))
	}
	writeJSON(w, res)
	s.observe("filter", http.StatusOK, start)
}

// claimWait bounds how long filter waits for a claim of the pod that the
// extender's informer has not received yet: the scheduler's own cache can
// be ahead of it by a few milliseconds, more on a loaded control plane.
var claimWait = time.Second

// snapshotAPIWait bounds how long filter waits for the VolumeSnapshot API
// to be probed and synced when a claim of the pod restores a snapshot and
// the API was not served at the last probe (the snapshot CRDs were just
// installed): an extender cannot retry a pod it rejected, kube-scheduler
// does so only on its next cluster event. Well within the scheduler's
// httpTimeout (5 s in the shipped configuration).
var snapshotAPIWait = 3 * time.Second

// podVolumes is Core.PodVolumes, asked again every 50 ms for up to
// claimWait while a claim of the pod is missing, and for up to
// snapshotAPIWait while a claim waits for the VolumeSnapshot API.
func (s *Server) podVolumes(ctx context.Context, pod *v1.Pod) (*scheduler.PodVolumes, error) {
	start := time.Now()
	for {
		podVols, err := s.core.PodVolumes(pod)
		waited := time.Since(start)
		missing := errors.Is(err, scheduler.ErrClaimNotFound) && waited < claimWait
		if !missing && (err != nil || !podVols.AwaitsSnapshotAPI() || waited >= snapshotAPIWait) {
			return podVols, err
		}
		select {
		case <-ctx.Done():
			return podVols, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) prioritize(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	args, ok := s.readArgs(w, r, "prioritize", start)
	if !ok {
		return
	}
	names := nodeNames(args)
	list := make(extenderv1.HostPriorityList, 0, len(names))
	podVols, err := s.core.PodVolumes(args.Pod)
	for _, name := range names {
		var score int64
		if err == nil && podVols != nil {
			if node, nerr := s.nodes.Get(name); nerr == nil {
				score = s.core.Score(podVols, node) * extenderv1.MaxExtenderPriority / scheduler.MaxScore
			}
		}
		list = append(list, extenderv1.HostPriority{Host: name, Score: score})
	}
	writeJSON(w, list)
	s.observe("prioritize", http.StatusOK, start)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
