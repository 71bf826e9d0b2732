package faults

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

// call is one Check of a sequence.
type call struct {
	method  string
	segment map[string]string
}

func calls(method string, n int) []call {
	out := make([]call, n)
	for i := range out {
		out[i] = call{method: method}
	}
	return out
}

// sequence returns a random source that yields values in turn.
func sequence(values ...float64) func() float64 {
	return func() float64 {
		v := values[0]
		values = values[1:]
		return v
	}
}

func TestCheckCodes(t *testing.T) {
	z1 := map[string]string{"zone": "z1"}
	z2rack := map[string]string{"zone": "z2", "rack": "r1"}
	tests := []struct {
		name   string
		rules  []Rule
		random func() float64
		calls  []call
		want   []codes.Code
	}{
		{
			name:  "every call",
			rules: []Rule{{Method: "CreateVolume", Code: "RESOURCE_EXHAUSTED"}},
			calls: calls("CreateVolume", 2),
			want:  []codes.Code{codes.ResourceExhausted, codes.ResourceExhausted},
		},
		{
			name:  "every third call",
			rules: []Rule{{Method: "DeleteVolume", Code: "Unavailable", Every: 3}},
			calls: calls("DeleteVolume", 6),
			want:  []codes.Code{codes.OK, codes.OK, codes.Unavailable, codes.OK, codes.OK, codes.Unavailable},
		},
		{
			name:  "other methods are not counted",
			rules: []Rule{{Method: "DeleteVolume", Code: "Unavailable", Every: 2}},
			calls: []call{{method: "DeleteVolume"}, {method: "CreateVolume"}, {method: "DeleteVolume"}},
			want:  []codes.Code{codes.OK, codes.OK, codes.Unavailable},
		},
		{
			name:  "count retires the rule",
			rules: []Rule{{Method: "*", Code: "Internal", Count: 2}},
			calls: []call{{method: "Probe"}, {method: "CreateVolume"}, {method: "Probe"}},
			want:  []codes.Code{codes.Internal, codes.Internal, codes.OK},
		},
		{
			name:   "probability with an injected source",
			rules:  []Rule{{Method: "Probe", Code: "Aborted", Probability: 0.25}},
			random: sequence(0.1, 0.3, 0.24, 0.9),
			calls:  calls("Probe", 4),
			want:   []codes.Code{codes.Aborted, codes.OK, codes.Aborted, codes.OK},
		},
		{
			name:   "probability and count",
			rules:  []Rule{{Method: "Probe", Code: "Aborted", Probability: 0.5, Count: 1}},
			random: sequence(0.1, 0.1),
			calls:  calls("Probe", 2),
			want:   []codes.Code{codes.Aborted, codes.OK},
		},
		{
			name:  "segment scope",
			rules: []Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Segment: map[string]string{"zone": "z2"}}},
			calls: []call{{"CreateVolume", z1}, {"CreateVolume", z2rack}, {"CreateVolume", nil}},
			want:  []codes.Code{codes.OK, codes.ResourceExhausted, codes.OK},
		},
		{
			name:  "segment scope needs the key",
			rules: []Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Segment: map[string]string{"rack": ""}}},
			calls: []call{{"CreateVolume", z1}},
			want:  []codes.Code{codes.OK},
		},
		{
			name: "first rule with a code wins",
			rules: []Rule{
				{Method: "CreateVolume"},
				{Method: "CreateVolume", Code: "Unavailable"},
				{Method: "CreateVolume", Code: "Internal"},
			},
			calls: calls("CreateVolume", 1),
			want:  []codes.Code{codes.Unavailable},
		},
		{
			name:  "latency only",
			rules: []Rule{{Method: "CreateVolume", Latency: Duration(time.Nanosecond)}},
			calls: calls("CreateVolume", 1),
			want:  []codes.Code{codes.OK},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			inj, err := NewInjector(tc.rules, Options{Random: tc.random})
			if err != nil {
				t.Fatal(err)
			}
			var got []codes.Code
			for _, c := range tc.calls {
				got = append(got, status.Code(inj.Check(ctx, c.method, c.segment)))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("codes (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeClock is an After that reports each wait and returns when the test
// says so.
type fakeClock struct {
	waits chan time.Duration
	fire  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{waits: make(chan time.Duration, 1), fire: make(chan time.Time)}
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.waits <- d
	return f.fire
}

func TestCheckLatency(t *testing.T) {
	tests := []struct {
		name     string
		cancel   bool
		wantCode codes.Code
	}{
		{name: "waits for the summed latency, then fails", wantCode: codes.Unavailable},
		{name: "the caller's context ends the wait", cancel: true, wantCode: codes.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			clock := newFakeClock()
			inj, err := NewInjector([]Rule{
				{Method: "CreateVolume", Latency: Duration(200 * time.Millisecond)},
				{Method: "CreateVolume", Code: "Unavailable", Latency: Duration(50 * time.Millisecond)},
				{Method: "DeleteVolume", Latency: Duration(time.Hour)},
			}, Options{After: clock.After})
			if err != nil {
				t.Fatal(err)
			}
			result := make(chan error, 1)
			go func() { result <- inj.Check(ctx, "CreateVolume", nil) }()
			if got := <-clock.waits; got != 250*time.Millisecond {
				t.Errorf("waits %v, want 250ms", got)
			}
			select {
			case err := <-result:
				t.Fatalf("Check returned %v before its latency elapsed", err)
			default:
			}
			if tc.cancel {
				cancel()
			} else {
				clock.fire <- time.Time{}
			}
			if got := status.Code(<-result); got != tc.wantCode {
				t.Errorf("code %v, want %v", got, tc.wantCode)
			}
		})
	}
}

func TestSetValidates(t *testing.T) {
	tests := []struct {
		name    string
		rule    Rule
		wantErr bool
	}{
		{name: "valid", rule: Rule{Method: "NodePublishVolume", Code: "internal", Every: 2, Count: 3}},
		{name: "wildcard", rule: Rule{Method: "*", Latency: Duration(time.Second)}},
		{name: "no method", rule: Rule{Code: "Internal"}, wantErr: true},
		{name: "misspelt method", rule: Rule{Method: "CreateVolumes"}, wantErr: true},
		{name: "unknown code", rule: Rule{Method: "CreateVolume", Code: "NoSuchCode"}, wantErr: true},
		{name: "negative every", rule: Rule{Method: "CreateVolume", Every: -1}, wantErr: true},
		{name: "negative latency", rule: Rule{Method: "CreateVolume", Latency: Duration(-time.Second)}, wantErr: true},
		{name: "probability above 1", rule: Rule{Method: "CreateVolume", Probability: 1.5}, wantErr: true},
		{name: "late success", rule: Rule{Method: "CreateVolume", Latency: Duration(time.Minute), LateSuccess: true, Count: 1}},
		{name: "late success without latency", rule: Rule{Method: "CreateVolume", LateSuccess: true}, wantErr: true},
		{name: "late success with a code", rule: Rule{Method: "CreateVolume", Code: "Internal", Latency: Duration(time.Second), LateSuccess: true}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inj, err := NewInjector([]Rule{{Method: "Probe"}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = inj.Set([]Rule{tc.rule})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Set error = %v, want error %v", err, tc.wantErr)
			}
			want := []Rule{tc.rule}
			if tc.wantErr {
				want = []Rule{{Method: "Probe"}} // unchanged
			}
			if diff := cmp.Diff(want, inj.Rules()); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRuleJSON(t *testing.T) {
	in := `[{"method":"CreateVolume","code":"ResourceExhausted","every":2,"latency":"1.5s","segment":{"zone":"z2"},"count":1}]`
	var rules []Rule
	if err := json.Unmarshal([]byte(in), &rules); err != nil {
		t.Fatal(err)
	}
	want := []Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Every: 2, Latency: Duration(1500 * time.Millisecond),
		Segment: map[string]string{"zone": "z2"}, Count: 1}}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	out, err := json.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("encoded %s, want %s", out, in)
	}
	if err := json.Unmarshal([]byte(`[{"method":"Probe","latency":5}]`), &rules); err == nil {
		t.Error("a latency without unit was accepted")
	}
}

func TestParseRules(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Rule
		wantErr bool
	}{
		{name: "empty list", in: `[]`, want: []Rule{}},
		{name: "one rule", in: `[{"method":"Probe","code":"Unavailable","count":2}]`, want: []Rule{{Method: "Probe", Code: "Unavailable", Count: 2}}},
		{
			name: "late success",
			in:   `[{"method":"CreateSnapshot","latency":"30s","lateSuccess":true}]`,
			want: []Rule{{Method: "CreateSnapshot", Latency: Duration(30 * time.Second), LateSuccess: true}},
		},
		{name: "late success without latency", in: `[{"method":"CreateVolume","lateSuccess":true}]`, wantErr: true},
		{name: "unknown field", in: `[{"method":"Probe","rate":2}]`, wantErr: true},
		{name: "invalid rule", in: `[{"method":"Probe","code":"Sometimes"}]`, wantErr: true},
		{name: "not a list", in: `{"method":"Probe"}`, wantErr: true},
		{name: "trailing data", in: `[] x`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRules([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		rules []Rule
		want  Verdict
	}{
		{name: "no rule", want: Verdict{}},
		{
			name:  "latency adds up, the late success marks the call",
			rules: []Rule{{Method: "CreateVolume", Latency: Duration(time.Second)}, {Method: "*", Latency: Duration(2 * time.Second), LateSuccess: true}},
			want:  Verdict{Latency: 3 * time.Second, LateSuccess: true},
		},
		{
			name:  "a late success of another method does not",
			rules: []Rule{{Method: "DeleteVolume", Latency: Duration(time.Second), LateSuccess: true}, {Method: "CreateVolume", Code: "Aborted"}},
			want:  Verdict{Err: status.Error(codes.Aborted, "injected fault: CreateVolume fails with Aborted")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inj, err := NewInjector(tc.rules, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := inj.Decide("CreateVolume", nil)
			if got.Latency != tc.want.Latency || got.LateSuccess != tc.want.LateSuccess || status.Convert(got.Err).String() != status.Convert(tc.want.Err).String() {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Wait ends with its context: the caller of a late success passes one that
// the end of the call does not reach, and gets the whole latency.
func TestWaitLateSuccess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	caller, cancel := context.WithCancel(ctx)
	clock := newFakeClock()
	inj, err := NewInjector([]Rule{{Method: "CreateVolume", Latency: Duration(time.Minute), LateSuccess: true}}, Options{After: clock.After})
	if err != nil {
		t.Fatal(err)
	}
	v := inj.Decide("CreateVolume", nil)
	result := make(chan error, 1)
	go func() { result <- inj.Wait(context.WithoutCancel(caller), v) }()
	<-clock.waits
	cancel() // the caller gives up
	select {
	case err := <-result: // Wait stopped waiting for the clock
		t.Fatalf("Wait returned %v when the caller gave up", err)
	case clock.fire <- time.Time{}:
	}
	if err := <-result; err != nil {
		t.Errorf("Wait = %v, want nil after the whole latency", err)
	}
}
