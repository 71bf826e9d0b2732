package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// Rule is one fault. JSON form (every field but method optional):
//
//	{"method":"CreateVolume","code":"ResourceExhausted","message":"zone z2 is full",
//	 "every":1,"probability":0,"latency":"200ms","segment":{"zone":"z2"},"count":0}
//
// A late success delays the call and then carries it out even when the
// caller has given up meanwhile (cancelled, or past its deadline):
//
//	{"method":"CreateVolume","latency":"30s","lateSuccess":true,"count":1}
type Rule struct {
	// Method is a CSI method name, e.g. "CreateVolume", or "*" for all.
	Method string `json:"method"`
	// Code is the gRPC code name to fail with, "ResourceExhausted" or
	// "RESOURCE_EXHAUSTED"; empty injects only Latency.
	Code string `json:"code,omitempty"`
	// Message is the error message; empty gives one that names the fault.
	Message string `json:"message,omitempty"`
	// Every fires the rule on every Nth matching call (0 or 1: every call).
	Every int `json:"every,omitempty"`
	// Probability, when > 0, fires the rule with this probability instead
	// of Every.
	Probability float64 `json:"probability,omitempty"`
	// Latency delays the calls the rule fires on.
	Latency Duration `json:"latency,omitempty"`
	// Segment limits the rule to calls for a segment that has every one of
	// these keys and values. Which segment a call is for is the caller's
	// business (see the driver's README).
	Segment map[string]string `json:"segment,omitempty"`
	// Count, when > 0, retires the rule after it fired this many times.
	Count int `json:"count,omitempty"`
	// LateSuccess makes the calls the rule fires on outlast their caller:
	// the driver waits the whole latency even when the caller's context
	// ends, then carries the call out (e.g. creates the volume), while the
	// caller has seen DEADLINE_EXCEEDED or CANCELLED. It needs a latency
	// and excludes a code. Without it, a caller's end ends the wait and the
	// call is not carried out.
	LateSuccess bool `json:"lateSuccess,omitempty"`
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
		return fmt.Errorf("parsing latency: %w", err)
	}
	*d = Duration(v)
	return nil
}

// ParseCode reads a gRPC code name in either spelling: "ResourceExhausted"
// or "RESOURCE_EXHAUSTED" (case does not matter).
func ParseCode(name string) (codes.Code, error) {
	want := strings.ReplaceAll(strings.ToLower(name), "_", "")
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.ToLower(c.String()) == want {
			return c, nil
		}
	}
	return codes.Unknown, fmt.Errorf("unknown gRPC code %q", name)
}

// methods are the RPC names of the CSI services, from the spec's descriptor.
var methods = func() map[string]bool {
	out := map[string]bool{}
	services := csi.File_csi_proto.Services()
	for i := 0; i < services.Len(); i++ {
		ms := services.Get(i).Methods()
		for j := 0; j < ms.Len(); j++ {
			out[string(ms.Get(j).Name())] = true
		}
	}
	return out
}()

// Validate checks a rule: a CSI method name or "*", a known code, no
// negative numbers, a probability within [0, 1], a late success with a
// latency and without a code.
func (r Rule) Validate() error {
	if r.Method != "*" && !methods[r.Method] {
		return fmt.Errorf("fault rule: %q is not a CSI method name (e.g. \"CreateVolume\") nor \"*\"", r.Method)
	}
	if r.Code != "" {
		if _, err := ParseCode(r.Code); err != nil {
			return fmt.Errorf("fault rule for %s: %w", r.Method, err)
		}
	}
	if r.Every < 0 || r.Count < 0 || r.Latency < 0 {
		return fmt.Errorf("fault rule for %s: every, count and latency must not be negative", r.Method)
	}
	if r.Probability < 0 || r.Probability > 1 {
		return fmt.Errorf("fault rule for %s: probability must be within [0, 1]", r.Method)
	}
	if r.LateSuccess && (r.Latency == 0 || r.Code != "") {
		return fmt.Errorf("fault rule for %s: a late success needs a latency and no code", r.Method)
	}
	return nil
}

// ParseRules reads a JSON list of rules (unknown fields are errors) and
// validates them.
func ParseRules(data []byte) ([]Rule, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var rules []Rule
	if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("parsing fault rules: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("parsing fault rules: trailing data after the list")
	}
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	return rules, nil
}
