package inflight

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
)

// decisionsSeen records what a NameGuard told its Decisions.
type decisionsSeen struct{ deleted, taken []types.UID }

func (d *decisionsSeen) RecordVolumeDeleted(uid types.UID) { d.deleted = append(d.deleted, uid) }
func (d *decisionsSeen) RecordNameTaken(uid types.UID)     { d.taken = append(d.taken, uid) }

// TestNameGuardResolve: a PV create that found its name taken keeps the new
// volume when the existing PV holds it for the same claim, leaves it to
// another claim's PV of the same volume, and deletes it otherwise; each
// outcome but the first is told by a VolumeNameTaken Event and to
// Decisions, and a create to retry is an error.
func TestNameGuardResolve(t *testing.T) {
	csiPV := func(handle string, claimUID types.UID) *v1.PersistentVolume {
		pv := pvOf("pvc-uid-data", "data", claimUID)
		pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: "test.csi.example.com", VolumeHandle: handle}
		return pv
	}
	deleting := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		now := metav1.Now()
		pv.DeletionTimestamp, pv.Finalizers = &now, []string{"hold"}
		return pv
	}
	tests := []struct {
		name        string
		existing    *v1.PersistentVolume // nil: gone meanwhile
		deleteErr   error
		wantErr     bool
		wantDeleted bool
		wantEvent   string // a substring of the Event; "" for none
		wantTaken   bool
	}{
		{name: "our PV", existing: csiPV("vol-new", "uid-data")},
		{name: "PV of another volume", existing: csiPV("vol-old", "uid-data"), wantDeleted: true, wantEvent: "which was deleted"},
		{name: "our handle, PV being deleted", existing: deleting(csiPV("vol-new", "uid-data")), wantDeleted: true, wantEvent: "which was deleted"},
		{name: "our volume, another claim's PV", existing: csiPV("vol-new", "uid-other"), wantEvent: "left alone", wantTaken: true},
		{name: "PV gone meanwhile", wantErr: true},
		{name: "deleting the new volume fails", existing: csiPV("vol-old", "uid-data"), deleteErr: errors.New("driver down"),
			wantErr: true, wantDeleted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			events, decisions := record.NewFakeRecorder(10), &decisionsSeen{}
			var deleted []string
			g := NameGuard{PVs: fake.NewClientset(objs...).CoreV1().PersistentVolumes(), Recorder: events, Decisions: decisions,
				DeleteVolume: func(_ context.Context, pv *v1.PersistentVolume) error {
					deleted = append(deleted, pv.Spec.CSI.VolumeHandle)
					return tc.deleteErr
				}}
			err := g.Resolve(ctx, csiPV("vol-new", "uid-data"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Resolve: %v, want error %t", err, tc.wantErr)
			}
			if got := len(deleted) == 1 && deleted[0] == "vol-new"; got != tc.wantDeleted || len(deleted) > 1 {
				t.Errorf("deleted %v, want the new volume deleted: %t", deleted, tc.wantDeleted)
			}
			select {
			case ev := <-events.Events:
				if tc.wantEvent == "" || !strings.Contains(ev, ReasonVolumeNameTaken) || !strings.Contains(ev, tc.wantEvent) {
					t.Errorf("event %q, want %q", ev, tc.wantEvent)
				}
			default:
				if tc.wantEvent != "" {
					t.Errorf("no event, want %s saying %q", ReasonVolumeNameTaken, tc.wantEvent)
				}
			}
			wantDeletedDecision := tc.wantDeleted && !tc.wantErr
			if (len(decisions.deleted) == 1) != wantDeletedDecision || (len(decisions.taken) == 1) != tc.wantTaken {
				t.Errorf("decisions %+v, want volume deleted %t, name taken %t", decisions, wantDeletedDecision, tc.wantTaken)
			}
		})
	}
}
