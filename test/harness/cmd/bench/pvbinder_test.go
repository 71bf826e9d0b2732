package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// auditLine is one audit event of the log for the tests: second s of the
// test's minute.
func auditLine(id int, user, agent, verb, resource, subresource, ns, name string, s, code int) string {
	return `{"auditID":"` + strconv.Itoa(id) + `","stage":"ResponseComplete","verb":"` + verb + `","user":{"username":"` + user +
		`"},"userAgent":"` + agent + `","objectRef":{"resource":"` + resource + `","subresource":"` + subresource + `","namespace":"` + ns +
		`","name":"` + name + `"},"requestReceivedTimestamp":"2026-01-01T00:00:` + strconv.Itoa(10+s) + `Z","responseStatus":{"code":` +
		strconv.Itoa(code) + `}}`
}

// TestBinderWrites checks how the PV controller's writes of a run are told
// apart in the audit log: by its user agent (kube-controller-manager and
// the benchmark are both the admin user), the mark of a claim before its
// PV was created apart from the binding writes after, refused writes
// apart, and writes to other runs' objects or after the run not at all.
func TestBinderWrites(t *testing.T) {
	const (
		admin = "system:admin"
		kcm   = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:" + pvBinderAgent
		bench = "bench/v0.0.0"
		ns    = "bench-1-burst"
	)
	pvClaim := map[string]string{"pv-a": "claim-a"}
	created := func(s int) string {
		return auditLine(100+s, provisionerUser, "csi-provisioner", "create", "persistentvolumes", "", "", "pv-a", s, 201)
	}
	tests := []struct {
		name  string
		lines []string
		want  binderCounts
	}{
		{
			name: "mark, then the PV controller binds",
			lines: []string{
				auditLine(1, admin, kcm, "update", "persistentvolumeclaims", "", ns, "claim-a", 1, 200),
				created(2),
				auditLine(2, admin, kcm, "update", "persistentvolumes", "status", "", "pv-a", 3, 200),
				auditLine(3, admin, kcm, "update", "persistentvolumeclaims", "", ns, "claim-a", 4, 200),
				auditLine(4, admin, kcm, "update", "persistentvolumeclaims", "status", ns, "claim-a", 5, 200),
			},
			want: binderCounts{bind: 3, mark: 1, byKey: map[string]int{"update persistentvolumeclaims (mark)": 1,
				"update persistentvolumes/status": 1, "update persistentvolumeclaims": 1, "update persistentvolumeclaims/status": 1}},
		},
		{
			name: "bound through: only the mark",
			lines: []string{
				auditLine(1, admin, kcm, "update", "persistentvolumeclaims", "", ns, "claim-a", 1, 200),
				created(2),
				// The provisioner's and the benchmark's writes are not the PV controller's.
				auditLine(2, provisionerUser, "csi-provisioner", "update", "persistentvolumeclaims", "", ns, "claim-a", 3, 200),
				auditLine(3, admin, bench, "update", "persistentvolumeclaims", "", ns, "claim-a", 4, 200),
			},
			want: binderCounts{mark: 1, byKey: map[string]int{"update persistentvolumeclaims (mark)": 1}},
		},
		{
			name: "a refused write is not a write",
			lines: []string{
				created(2),
				auditLine(1, admin, kcm, "update", "persistentvolumeclaims", "", ns, "claim-a", 3, 409),
			},
			want: binderCounts{byKey: map[string]int{"update persistentvolumeclaims (409)": 1}},
		},
		{
			name: "other runs' objects and writes after the run do not count",
			lines: []string{
				created(2),
				auditLine(1, admin, kcm, "update", "persistentvolumeclaims", "", "bench-2-burst", "claim-a", 3, 200),
				auditLine(2, admin, kcm, "update", "persistentvolumes", "status", "", "pv-b", 3, 200),
				auditLine(3, admin, kcm, "update", "persistentvolumes", "status", "", "pv-a", 30, 200),
			},
			want: binderCounts{byKey: map[string]int{}},
		},
	}
	end := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if err := os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			log, err := readBinderLog(path)
			if err != nil {
				t.Fatal(err)
			}
			got := log.count(ns, pvClaim, nil, end)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(binderCounts{})); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBinderWritesPVSeenByTheWatch checks that without the provisioner's
// create in the audit log, the time the benchmark's watch saw the PV tells
// the mark from a binding write.
func TestBinderWritesPVSeenByTheWatch(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, 10+s, 0, time.UTC) }
	log := binderLog{pvCreated: map[string]time.Time{}, writes: []binderWrite{
		{at: at(1), verb: "update", resource: "persistentvolumeclaims", namespace: "ns", name: "claim-a", code: 200},
		{at: at(3), verb: "update", resource: "persistentvolumeclaims", namespace: "ns", name: "claim-a", code: 200},
	}}
	got := log.count("ns", map[string]string{"pv-a": "claim-a"}, map[string]time.Time{"pv-a": at(2)}, at(20))
	if got.mark != 1 || got.bind != 1 {
		t.Errorf("%d marks and %d binding writes, want 1 and 1", got.mark, got.bind)
	}
}
