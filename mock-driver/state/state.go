package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// idPrefix starts every volume ID; the rest is a sequence number.
	idPrefix = "vol-"
	// snapshotPrefix starts every snapshot ID; the rest is a sequence
	// number of its own.
	snapshotPrefix = "snap-"
)

// Volume is one volume of the mock driver.
type Volume struct {
	// ID is the volume handle, "vol-" and a sequence number.
	ID string `json:"id"`
	// Name is the CreateVolume name (idempotency key).
	Name string `json:"name"`
	// CapacityBytes is the volume's size.
	CapacityBytes int64 `json:"capacityBytes"`
	// Segment is the topology segment the volume lives in (empty: everywhere).
	Segment map[string]string `json:"segment,omitempty"`
	// Parameters are the CreateVolume parameters.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Block is true for a raw block volume.
	Block bool `json:"block,omitempty"`
	// AccessMode is the CSI access mode the volume was created with, e.g.
	// "SINGLE_NODE_WRITER".
	AccessMode string `json:"accessMode,omitempty"`
	// Published maps the node IDs of ControllerPublishVolume to its
	// read-only flag.
	Published map[string]bool `json:"published,omitempty"`
	// MutableParameters are the CreateVolume mutable parameters, updated
	// by every ControllerModifyVolume.
	MutableParameters map[string]string `json:"mutableParameters,omitempty"`
	// ContentSource is what the volume was made from; nil for an empty
	// volume.
	ContentSource *ContentSource `json:"contentSource,omitempty"`
}

// ContentSource is the source of a cloned or restored volume: exactly one
// field is set.
type ContentSource struct {
	// SnapshotID is the snapshot a volume was restored from.
	SnapshotID string `json:"snapshotId,omitempty"`
	// VolumeID is the volume a volume was cloned from.
	VolumeID string `json:"volumeId,omitempty"`
}

// Clone returns a deep copy of v.
func (v *Volume) Clone() *Volume {
	c := *v
	c.Segment = maps.Clone(v.Segment)
	c.Parameters = maps.Clone(v.Parameters)
	c.Published = maps.Clone(v.Published)
	c.MutableParameters = maps.Clone(v.MutableParameters)
	if v.ContentSource != nil {
		src := *v.ContentSource
		c.ContentSource = &src
	}
	return &c
}

// Snapshot is one snapshot of the mock driver. It outlives its source
// volume and remembers the segment it can be restored in.
type Snapshot struct {
	// ID is the snapshot handle, "snap-" and a sequence number.
	ID string `json:"id"`
	// Name is the CreateSnapshot name (idempotency key).
	Name string `json:"name"`
	// SourceVolumeID is the volume the snapshot was taken of.
	SourceVolumeID string `json:"sourceVolumeId"`
	// SizeBytes is the source volume's size.
	SizeBytes int64 `json:"sizeBytes"`
	// Segment is the source volume's segment, where restores go.
	Segment map[string]string `json:"segment,omitempty"`
	// Parameters are the CreateSnapshot parameters.
	Parameters map[string]string `json:"parameters,omitempty"`
	// CreationTime is when the snapshot was cut.
	CreationTime time.Time `json:"creationTime"`
}

// Clone returns a deep copy of s.
func (s *Snapshot) Clone() *Snapshot {
	c := *s
	c.Segment = maps.Clone(s.Segment)
	c.Parameters = maps.Clone(s.Parameters)
	return &c
}

// PublishedNodes returns the IDs of the nodes the volume is published to,
// sorted.
func (v *Volume) PublishedNodes() []string {
	nodes := make([]string, 0, len(v.Published))
	for n := range v.Published {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}

// Seq returns the sequence number of a volume ID made by a Store, and false
// for any other string.
func Seq(id string) (int64, bool) { return seq(idPrefix, id) }

// SnapshotSeq returns the sequence number of a snapshot ID made by a Store,
// and false for any other string.
func SnapshotSeq(id string) (int64, bool) { return seq(snapshotPrefix, id) }

func seq(prefix, id string) (int64, bool) {
	digits, ok := strings.CutPrefix(id, prefix)
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// Store is the set of volumes and snapshots. It is safe for concurrent use:
// Update and View run one at a time. With a file, every successful Update is
// written to it (temporary file, fsync, rename, fsync of the directory)
// before Update returns, so whatever a caller was answered survives a crash
// of the process or the machine.
type Store struct {
	mu   sync.Mutex
	path string
	data Data
}

// Data is the content of a Store, handed to Update and View.
type Data struct {
	// Volumes are the volumes by ID.
	Volumes map[string]*Volume
	// Snapshots are the snapshots by ID.
	Snapshots map[string]*Snapshot
	// next and nextSnapshot are the last sequence numbers handed out.
	next, nextSnapshot int64
	// writable is true inside Update only.
	writable bool
}

// NewVolumeID returns a fresh volume ID; only within Update.
func (d *Data) NewVolumeID() string {
	d.mustWrite()
	d.next++
	return fmt.Sprintf("%s%06d", idPrefix, d.next)
}

// NewSnapshotID returns a fresh snapshot ID; only within Update.
func (d *Data) NewSnapshotID() string {
	d.mustWrite()
	d.nextSnapshot++
	return fmt.Sprintf("%s%06d", snapshotPrefix, d.nextSnapshot)
}

func (d *Data) mustWrite() {
	if !d.writable {
		panic("state: a new ID was asked for outside Update")
	}
}

// clone returns a deep copy of d.
func (d *Data) clone() Data {
	c := Data{
		Volumes:   make(map[string]*Volume, len(d.Volumes)),
		Snapshots: make(map[string]*Snapshot, len(d.Snapshots)),
		next:      d.next, nextSnapshot: d.nextSnapshot,
	}
	for id, v := range d.Volumes {
		c.Volumes[id] = v.Clone()
	}
	for id, s := range d.Snapshots {
		c.Snapshots[id] = s.Clone()
	}
	return c
}

// fileFormat is the JSON form of the state file.
type fileFormat struct {
	Next         int64       `json:"next"`
	NextSnapshot int64       `json:"nextSnapshot,omitempty"`
	Volumes      []*Volume   `json:"volumes"`
	Snapshots    []*Snapshot `json:"snapshots,omitempty"`
}

// Open returns a Store persisted at path, loaded from it when the file
// exists, or an in-memory store when path is empty. Temporary files that a
// killed process left next to the state file are removed.
func Open(path string) (*Store, error) {
	s := &Store{path: path, data: Data{Volumes: map[string]*Volume{}, Snapshots: map[string]*Snapshot{}}}
	if path == "" {
		return s, nil
	}
	if err := removeTemporaries(path); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state file: %w", err)
	}
	var f fileFormat
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parsing state file %q: %w", path, err)
	}
	s.data.next, s.data.nextSnapshot = f.Next, f.NextSnapshot
	for _, v := range f.Volumes {
		n, ok := Seq(v.ID)
		if !ok {
			return nil, fmt.Errorf("state file %q: invalid volume ID %q", path, v.ID)
		}
		s.data.Volumes[v.ID] = v
		s.data.next = max(s.data.next, n)
	}
	for _, snap := range f.Snapshots {
		n, ok := SnapshotSeq(snap.ID)
		if !ok {
			return nil, fmt.Errorf("state file %q: invalid snapshot ID %q", path, snap.ID)
		}
		s.data.Snapshots[snap.ID] = snap
		s.data.nextSnapshot = max(s.data.nextSnapshot, n)
	}
	return s, nil
}

// removeTemporaries removes the temporary files of writeFileAtomic that a
// process killed between creating and renaming one left behind.
func removeTemporaries(path string) error {
	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(path), temporaryPattern(path)))
	if err != nil {
		return fmt.Errorf("state file %q: %w", path, err)
	}
	for _, f := range leftovers {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing a temporary state file: %w", err)
		}
	}
	return nil
}

// temporaryPattern is the name pattern (for os.CreateTemp and
// filepath.Glob) of the temporary files of path.
func temporaryPattern(path string) string { return "." + filepath.Base(path) + ".tmp-*" }

// Update runs fn with exclusive access to the data and, when fn returns
// nil, persists the result; when fn or persisting fails, every change fn made
// is undone and the error returned. fn may add, change or delete volumes
// and snapshots; d.NewVolumeID and d.NewSnapshotID hand out fresh IDs.
func (s *Store) Update(fn func(d *Data) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.data.clone()
	s.data.writable = true
	err := fn(&s.data)
	s.data.writable = false
	if err == nil {
		err = s.saveLocked()
	}
	if err != nil {
		s.data = before
	}
	return err
}

// View runs fn with read access to the data; fn must not modify them nor
// keep them after it returns.
func (s *Store) View(fn func(d *Data)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.data)
}

// List returns a deep copy of all volumes in ID sequence order.
func (s *Store) List() []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Volume, 0, len(s.data.Volumes))
	for _, v := range s.data.Volumes {
		out = append(out, *v.Clone())
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := Seq(out[i].ID)
		b, _ := Seq(out[j].ID)
		return a < b
	})
	return out
}

// Snapshots returns a deep copy of all snapshots in ID sequence order.
func (s *Store) Snapshots() []Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Snapshot, 0, len(s.data.Snapshots))
	for _, snap := range s.data.Snapshots {
		out = append(out, *snap.Clone())
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := SnapshotSeq(out[i].ID)
		b, _ := SnapshotSeq(out[j].ID)
		return a < b
	})
	return out
}

// saveLocked writes the state file atomically: a temporary file in the same
// directory, fsync, rename.
func (s *Store) saveLocked() error {
	if s.path == "" {
		return nil
	}
	f := fileFormat{Next: s.data.next, NextSnapshot: s.data.nextSnapshot,
		Volumes: make([]*Volume, 0, len(s.data.Volumes))}
	for _, v := range s.data.Volumes {
		f.Volumes = append(f.Volumes, v)
	}
	for _, snap := range s.data.Snapshots {
		f.Snapshots = append(f.Snapshots, snap)
	}
	sort.Slice(f.Volumes, func(i, j int) bool { return f.Volumes[i].ID < f.Volumes[j].ID })
	sort.Slice(f.Snapshots, func(i, j int) bool { return f.Snapshots[i].ID < f.Snapshots[j].ID })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	if err := writeFileAtomic(s.path, data); err != nil {
		return fmt.Errorf("writing state file %q: %w", s.path, err)
	}
	return nil
}

// writeFileAtomic replaces path with data: readers see the old or the new
// content, never a part, also after a crash (temporary file in the same
// directory, fsync, rename, fsync of the directory).
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), temporaryPattern(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Persist the rename itself.
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
