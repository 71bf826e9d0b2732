package faults

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options are an Injector's sources of randomness and time; zero fields get
// the real ones.
type Options struct {
	// Random returns a number in [0, 1); default math/rand/v2.Float64.
	Random func() float64
	// After is time.After; a test passes a fake clock's.
	After func(time.Duration) <-chan time.Time
}

// Injector holds the active rules and applies them to calls. It is safe for
// concurrent use; every rule counts the calls it matches across all callers.
type Injector struct {
	random func() float64
	after  func(time.Duration) <-chan time.Time

	mu    sync.Mutex
	rules []*ruleState
}

// ruleState is a rule with its counters.
type ruleState struct {
	Rule
	code  codes.Code
	calls int // matching calls seen
	fired int
}

// NewInjector returns an Injector with rules.
func NewInjector(rules []Rule, opts Options) (*Injector, error) {
	if opts.Random == nil {
		opts.Random = rand.Float64
	}
	if opts.After == nil {
		opts.After = time.After
	}
	i := &Injector{random: opts.Random, after: opts.After}
	return i, i.Set(rules)
}

// Set replaces all rules and their counters; an empty list clears them. An
// invalid rule changes nothing and is returned as the error.
func (i *Injector) Set(rules []Rule) error {
	states := make([]*ruleState, 0, len(rules))
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return err
		}
		code := codes.OK
		if r.Code != "" {
			code, _ = ParseCode(r.Code)
		}
		r.Segment = maps.Clone(r.Segment)
		states = append(states, &ruleState{Rule: r, code: code})
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules = states
	return nil
}

// Rules returns the active rules, retired ones included.
func (i *Injector) Rules() []Rule {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]Rule, 0, len(i.rules))
	for _, r := range i.rules {
		rule := r.Rule
		rule.Segment = maps.Clone(r.Segment)
		out = append(out, rule)
	}
	return out
}

// Verdict is what the rules decided for one call.
type Verdict struct {
	// Latency is the sum of the latencies of the rules that fired.
	Latency time.Duration
	// LateSuccess is true when a firing rule is a late success: the call
	// is to be carried out after Latency even when its caller has given
	// up by then.
	LateSuccess bool
	// Err is the status error of the first firing rule with a code, or
	// nil.
	Err error
}

// Decide applies the rules to one call of method for segment (nil when the
// call concerns no segment), counting the call, and returns their verdict
// without waiting.
func (i *Injector) Decide(method string, segment map[string]string) Verdict {
	var v Verdict
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, r := range i.rules {
		if !r.matches(method, segment) {
			continue
		}
		r.calls++
		if !r.fires(i.random) {
			continue
		}
		r.fired++
		v.Latency += time.Duration(r.Latency)
		v.LateSuccess = v.LateSuccess || r.LateSuccess
		if v.Err == nil && r.code != codes.OK {
			msg := r.Message
			if msg == "" {
				msg = fmt.Sprintf("injected fault: %s fails with %s", method, r.code)
			}
			v.Err = status.Error(r.code, msg)
		}
	}
	return v
}

// Wait waits for v's latency, then returns v.Err. When ctx ends first, it
// returns ctx's error as a status. (For a late success, the caller passes a
// context that the end of the call does not reach.)
func (i *Injector) Wait(ctx context.Context, v Verdict) error {
	if v.Latency > 0 {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-i.after(v.Latency):
		}
	}
	return v.Err
}

// Check is Decide and Wait on ctx: every rule that fires adds its latency;
// Check waits for the sum, then returns the status error of the first
// firing rule with a code, or nil. When ctx ends during the wait, it returns
// ctx's error as a status; it does not tell late successes apart.
func (i *Injector) Check(ctx context.Context, method string, segment map[string]string) error {
	return i.Wait(ctx, i.Decide(method, segment))
}

func (r *ruleState) matches(method string, segment map[string]string) bool {
	if r.Method != "*" && r.Method != method {
		return false
	}
	if r.Count > 0 && r.fired >= r.Count {
		return false
	}
	for k, v := range r.Segment {
		if got, ok := segment[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (r *ruleState) fires(random func() float64) bool {
	if r.Probability > 0 {
		return random() < r.Probability
	}
	return r.Every <= 1 || r.calls%r.Every == 0
}
