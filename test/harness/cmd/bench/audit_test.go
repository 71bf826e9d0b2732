package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReadAuditKeysRefusedRequests checks that a request the API server
// refused (429 of its in-flight limit, 409 conflict) is counted apart from
// the write its verb names, so that a retried create is not taken for a
// second object.
func TestReadAuditKeysRefusedRequests(t *testing.T) {
	event := func(id, verb, resource string, code int) string {
		return `{"auditID":"` + id + `","stage":"ResponseComplete","verb":"` + verb + `","user":{"username":"` + nodeProvisionerUser +
			`"},"objectRef":{"resource":"` + resource + `"},"requestReceivedTimestamp":"2026-01-01T00:00:0` + id + `Z","responseStatus":{"code":` +
			strconv.Itoa(code) + `}}`
	}
	tests := []struct {
		name  string
		lines []string
		want  map[string]int
	}{
		{"created", []string{event("1", "create", "persistentvolumes", 201)}, map[string]int{"create persistentvolumes": 1}},
		{"throttled, then created", []string{event("1", "create", "persistentvolumes", 429), event("2", "create", "persistentvolumes", 201)},
			map[string]int{"create persistentvolumes": 1, "create persistentvolumes (429)": 1}},
		{"conflict", []string{event("1", "update", "csistoragecapacities", 409), event("2", "update", "csistoragecapacities", 200)},
			map[string]int{"update csistoragecapacities": 1, "update csistoragecapacities (409)": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if err := os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			reqs, err := readAudit(path)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, r := range reqs {
				got[r.key]++
			}
			if len(got) != len(tc.want) {
				t.Fatalf("requests %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("requests %v, want %v", got, tc.want)
				}
			}
		})
	}
}
