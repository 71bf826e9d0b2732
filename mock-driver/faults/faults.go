// Package faults injects errors and latency into the mock driver's CSI calls,
// by method, every Nth call or with a probability, optionally only for one
// topology segment.
package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Rule is one fault. JSON form:
//
//	{"method":"CreateVolume","code":"ResourceExhausted","every":1,
//	 "segment":{"zone":"z2"},"latency":"200ms","count":0,"message":"zone z2 is full"}
type Rule struct {
	// Method is the CSI method name, e.g. "CreateVolume"; "*" matches all.
	Method string `json:"method"`
	// Code is the gRPC code name ("ResourceExhausted" or "RESOURCE_EXHAUSTED");
	// empty injects only Latency.
	Code string `json:"code,omitempty"`
	// Message is the error message; a default names the rule.
	Message string `json:"message,omitempty"`
	// Every injects on every Nth matching call (1 or 0: every call).
	Every int `json:"every,omitempty"`
	// Probability, when > 0, injects with this probability instead of Every.
	Probability float64 `json:"probability,omitempty"`
	// Latency delays matching calls.
	Latency Duration `json:"latency,omitempty"`
	// Segment limits the rule to calls for this topology segment.
	Segment map[string]string `json:"segment,omitempty"`
	// Count, when > 0, is how many times the rule fires before it retires.
	Count int `json:"count,omitempty"`
}

// Duration is a time.Duration that reads and writes JSON as "150ms".
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("latency must be a duration string such as \"100ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseCode reads a gRPC code name in either spelling.
func ParseCode(name string) (codes.Code, error) {
	want := strings.ReplaceAll(strings.ToLower(name), "_", "")
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.ToLower(c.String()) == want {
			return c, nil
		}
	}
	return codes.Unknown, fmt.Errorf("unknown gRPC code %q", name)
}

// Validate checks a rule.
func (r Rule) Validate() error {
	if r.Method == "" {
		return fmt.Errorf("fault rule needs a method")
	}
	if r.Code != "" {
		if _, err := ParseCode(r.Code); err != nil {
			return err
		}
	}
	if r.Every < 0 || r.Count < 0 || r.Latency < 0 {
		return fmt.Errorf("fault rule for %s: every, count and latency must not be negative", r.Method)
	}
	if r.Probability < 0 || r.Probability > 1 {
		return fmt.Errorf("fault rule for %s: probability must be within [0, 1]", r.Method)
	}
	return nil
}

type ruleState struct {
	Rule
	code  codes.Code
	calls int
	fired int
}

// Injector holds the active rules. Safe for concurrent use.
type Injector struct {
	mu    sync.Mutex
	rules []*ruleState
	// random returns a number in [0, 1); replaceable in tests.
	random func() float64
}

// NewInjector returns an Injector with rules; random may be nil (math/rand).
func NewInjector(rules []Rule, random func() float64) (*Injector, error) {
	if random == nil {
		random = rand.Float64
	}
	i := &Injector{random: random}
	return i, i.Set(rules)
}

// Set replaces all rules (an empty list clears them).
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
		states = append(states, &ruleState{Rule: r, code: code})
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules = states
	return nil
}

// Rules returns the active rules.
func (i *Injector) Rules() []Rule {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]Rule, 0, len(i.rules))
	for _, r := range i.rules {
		out = append(out, r.Rule)
	}
	return out
}

// Check applies the rules to one call of method for segment (nil when the
// call concerns no segment): it sleeps for the latency of matching rules and
// returns the status error of the first rule that fires, or nil.
func (i *Injector) Check(ctx context.Context, method string, segment map[string]string) error {
	var latency time.Duration
	var fail error
	i.mu.Lock()
	for _, r := range i.rules {
		if !r.matches(method, segment) {
			continue
		}
		r.calls++
		if !r.fires(i.random) {
			continue
		}
		r.fired++
		latency += time.Duration(r.Latency)
		if fail == nil && r.code != codes.OK {
			msg := r.Message
			if msg == "" {
				msg = fmt.Sprintf("injected fault: %s fails with %s", method, r.code)
			}
			fail = status.Error(r.code, msg)
		}
	}
	i.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
	return fail
}

func (r *ruleState) matches(method string, segment map[string]string) bool {
	if r.Method != "*" && r.Method != method {
		return false
	}
	if r.Count > 0 && r.fired >= r.Count {
		return false
	}
	for k, v := range r.Segment {
		if segment[k] != v {
			return false
		}
	}
	return true
}

func (r *ruleState) fires(random func() float64) bool {
	if r.Probability > 0 {
		return random() < r.Probability
	}
	every := r.Every
	if every <= 1 {
		return true
	}
	return r.calls%every == 0
}
