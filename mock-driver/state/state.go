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
)

// idPrefix starts every volume ID; the rest is a sequence number.
const idPrefix = "vol-"

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
}

// Clone returns a deep copy of v.
func (v *Volume) Clone() *Volume {
	c := *v
	c.Segment = maps.Clone(v.Segment)
	c.Parameters = maps.Clone(v.Parameters)
	c.Published = maps.Clone(v.Published)
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
func Seq(id string) (int64, bool) {
	digits, ok := strings.CutPrefix(id, idPrefix)
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// Store is the set of volumes. It is safe for concurrent use: Update and
// View run one at a time. With a file, every successful Update is written
// to it (temporary file, fsync, rename) before Update returns.
type Store struct {
	mu      sync.Mutex
	path    string
	volumes map[string]*Volume // by ID
	next    int64
}

// fileFormat is the JSON form of the state file.
type fileFormat struct {
	Next    int64     `json:"next"`
	Volumes []*Volume `json:"volumes"`
}

// Open returns a Store persisted at path, loaded from it when the file
// exists, or an in-memory store when path is empty.
func Open(path string) (*Store, error) {
	s := &Store{path: path, volumes: map[string]*Volume{}}
	if path == "" {
		return s, nil
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
	s.next = f.Next
	for _, v := range f.Volumes {
		n, ok := Seq(v.ID)
		if !ok {
			return nil, fmt.Errorf("state file %q: invalid volume ID %q", path, v.ID)
		}
		s.volumes[v.ID] = v
		s.next = max(s.next, n)
	}
	return s, nil
}

// Update runs fn with exclusive access to the volumes and, when fn returns
// nil, persists the result; when fn or persisting fails, every change fn made
// is undone and the error returned. fn may add, change or delete entries of
// vols; newID returns a fresh volume ID.
func (s *Store) Update(fn func(vols map[string]*Volume, newID func() string) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	snapshot, next := s.copyLocked(), s.next
	err := fn(s.volumes, func() string {
		s.next++
		return fmt.Sprintf("%s%06d", idPrefix, s.next)
	})
	if err == nil {
		err = s.saveLocked()
	}
	if err != nil {
		s.volumes, s.next = snapshot, next
	}
	return err
}

// View runs fn with read access to the volumes; fn must not modify them nor
// keep them after it returns.
func (s *Store) View(fn func(vols map[string]*Volume)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.volumes)
}

// List returns a deep copy of all volumes in ID sequence order.
func (s *Store) List() []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Volume, 0, len(s.volumes))
	for _, v := range s.volumes {
		out = append(out, *v.Clone())
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := Seq(out[i].ID)
		b, _ := Seq(out[j].ID)
		return a < b
	})
	return out
}

func (s *Store) copyLocked() map[string]*Volume {
	out := make(map[string]*Volume, len(s.volumes))
	for id, v := range s.volumes {
		out[id] = v.Clone()
	}
	return out
}

// saveLocked writes the state file atomically: a temporary file in the same
// directory, fsync, rename.
func (s *Store) saveLocked() error {
	if s.path == "" {
		return nil
	}
	f := fileFormat{Next: s.next, Volumes: make([]*Volume, 0, len(s.volumes))}
	for _, v := range s.volumes {
		f.Volumes = append(f.Volumes, v)
	}
	sort.Slice(f.Volumes, func(i, j int) bool { return f.Volumes[i].ID < f.Volumes[j].ID })
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
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
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
