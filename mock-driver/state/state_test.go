package state

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func addVolume(name string, size int64) func(*Data) error {
	return func(d *Data) error {
		id := d.NewVolumeID()
		d.Volumes[id] = &Volume{ID: id, Name: name, CapacityBytes: size, Segment: map[string]string{"zone": "z1"}}
		return nil
	}
}

func TestStorePersistsAcrossOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := s.Update(addVolume(name, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(func(d *Data) error {
		delete(d.Volumes, "vol-000002")
		d.Volumes["vol-000001"].Published = map[string]bool{"n1": true}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	reopened, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.List(), reopened.List()); diff != "" {
		t.Errorf("volumes after reopening (-before +after):\n%s", diff)
	}
	// IDs are never reused, also not after a restart: the deleted vol-000002
	// and the existing ones stay distinct from the next.
	if err := reopened.Update(addVolume("d", 1)); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range reopened.List() {
		ids = append(ids, v.ID)
	}
	if diff := cmp.Diff([]string{"vol-000001", "vol-000003", "vol-000004"}, ids); diff != "" {
		t.Errorf("IDs (-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("state directory holds %d files, want only the state file (no temporary leftovers)", len(entries))
	}
}

func TestStoreUpdateRollsBack(t *testing.T) {
	tests := []struct {
		name string
		path func(t *testing.T) string
		fn   func(*Data) error
	}{
		{
			name: "fn fails",
			path: func(t *testing.T) string { return "" },
			fn: func(d *Data) error {
				d.Volumes["vol-000001"].CapacityBytes = 99
				id := d.NewVolumeID()
				d.Volumes[id] = &Volume{ID: id}
				sid := d.NewSnapshotID()
				d.Snapshots[sid] = &Snapshot{ID: sid}
				return errors.New("no")
			},
		},
		{
			name: "persisting fails",
			path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "state.json") },
			fn: func(d *Data) error {
				id := d.NewVolumeID()
				d.Volumes[id] = &Volume{ID: id}
				return nil
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Update(addVolume("a", 1)); err != nil {
				t.Fatal(err)
			}
			before, beforeSnaps := s.List(), s.Snapshots()
			if path != "" {
				// Make the directory read-only so the temporary file cannot be
				// created; as root that is not enough, so also replace the
				// directory's path by a file.
				dir := filepath.Dir(path)
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Update(tc.fn); err == nil {
				t.Fatal("Update succeeded, want an error")
			}
			if diff := cmp.Diff(before, s.List()); diff != "" {
				t.Errorf("volumes after a failed update (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(beforeSnaps, s.Snapshots()); diff != "" {
				t.Errorf("snapshots after a failed update (-want +got):\n%s", diff)
			}
			if err := s.Update(addVolume("b", 1)); path == "" && err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{name: "not JSON", content: "{"},
		{name: "foreign volume ID", content: `{"next":1,"volumes":[{"id":"disk-1","name":"a"}]}`},
		{name: "foreign snapshot ID", content: `{"next":1,"volumes":[],"snapshots":[{"id":"vol-000001","name":"a"}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(path); err == nil {
				t.Error("Open succeeded, want an error")
			}
		})
	}
}

func TestSeq(t *testing.T) {
	tests := []struct {
		id     string
		want   int64
		wantOK bool
	}{
		{id: "vol-000042", want: 42, wantOK: true},
		{id: "vol-1234567", want: 1234567, wantOK: true},
		{id: "vol-", wantOK: false},
		{id: "vol-0", wantOK: false},
		{id: "vol--1", wantOK: false},
		{id: "vol-+1", wantOK: false},
		{id: "invalid-token", wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			got, ok := Seq(tc.id)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Seq(%q) = %d, %v; want %d, %v", tc.id, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestListOrdersBySequence(t *testing.T) {
	s, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(d *Data) error {
		for _, id := range []string{"vol-1000000", "vol-999999", "vol-000002"} {
			d.Volumes[id] = &Volume{ID: id}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range s.List() {
		ids = append(ids, v.ID)
	}
	if diff := cmp.Diff([]string{"vol-000002", "vol-999999", "vol-1000000"}, ids); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestSnapshotsPersistAcrossOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := s.Update(func(d *Data) error {
		vid := d.NewVolumeID()
		d.Volumes[vid] = &Volume{ID: vid, Name: "src", CapacityBytes: 5, Segment: map[string]string{"zone": "z2"},
			MutableParameters: map[string]string{"iops": "300"}}
		for _, name := range []string{"s1", "s2"} {
			id := d.NewSnapshotID()
			d.Snapshots[id] = &Snapshot{ID: id, Name: name, SourceVolumeID: vid, SizeBytes: 5,
				Segment: map[string]string{"zone": "z2"}, CreationTime: cut}
		}
		cid := d.NewVolumeID()
		d.Volumes[cid] = &Volume{ID: cid, Name: "restore", CapacityBytes: 5, ContentSource: &ContentSource{SnapshotID: "snap-000002"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(d *Data) error {
		delete(d.Snapshots, "snap-000002")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	reopened, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.List(), reopened.List()); diff != "" {
		t.Errorf("volumes after reopening (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(s.Snapshots(), reopened.Snapshots()); diff != "" {
		t.Errorf("snapshots after reopening (-before +after):\n%s", diff)
	}
	// Snapshot IDs are never reused either.
	var id string
	if err := reopened.Update(func(d *Data) error {
		id = d.NewSnapshotID()
		d.Snapshots[id] = &Snapshot{ID: id}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if id != "snap-000003" {
		t.Errorf("new snapshot ID %q, want snap-000003", id)
	}
}

func TestOpenRemovesTemporaries(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(addVolume("a", 1)); err != nil {
		t.Fatal(err)
	}
	// What a process killed between creating and renaming its temporary
	// file leaves behind, and a file of someone else.
	for _, name := range []string{".state.json.tmp-123", "other.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reopened, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reopened.List()); n != 1 {
		t.Errorf("%d volumes after reopening, want 1", n)
	}
	var names []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"other.json", "state.json"}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestNewIDOutsideUpdatePanics(t *testing.T) {
	s, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewVolumeID within View did not panic")
		}
	}()
	s.View(func(d *Data) { d.NewVolumeID() })
}
