package faults

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParseRules feeds arbitrary faults files to ParseRules: it never
// panics, every rule it accepts validates, and accepted rules survive a
// round trip through JSON unchanged.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{
		`[{"method":"CreateVolume","code":"ResourceExhausted","count":1}]`,
		`[{"method":"CreateVolume","code":"Unavailable","every":3,"latency":"2s","probability":0.5,"segment":{"zone":"z1"}}]`,
		`[]`, `null`, `[{}]`, `[{"method":"CreateVolume","latency":"1m","lateSuccess":true,"count":1}]`, `[{"method":"*","lateSuccess":true}]`, `[{"method":"DeleteVolume","code":"NoSuchCode"}]`, `[{"latency":"-1s"}]`, `[] []`, `{"method":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := ParseRules(data)
		if err != nil {
			return
		}
		for _, r := range rules {
			if verr := r.Validate(); verr != nil {
				t.Fatalf("accepted rule %+v does not validate: %v", r, verr)
			}
		}
		again, err := json.Marshal(rules)
		if err != nil {
			t.Fatalf("accepted rules do not marshal: %v", err)
		}
		back, err := ParseRules(again)
		if err != nil {
			t.Fatalf("accepted rules %s do not parse again: %v", again, err)
		}
		if len(rules) > 0 && !reflect.DeepEqual(rules, back) {
			t.Fatalf("round trip changed the rules:\n%+v\n%+v", rules, back)
		}
	})
}
