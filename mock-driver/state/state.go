package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Volume is one volume of the mock driver.
type Volume struct {
	// ID is the volume handle.
	ID string `json:"id"`
	// Name is the CreateVolume name (idempotency key).
	Name string `json:"name"`
	// CapacityBytes is the volume's size.
	CapacityBytes int64 `json:"capacityBytes"`
	// Segment is the topology segment the volume lives in (nil: everywhere).
	Segment map[string]string `json:"segment,omitempty"`
	// Parameters are the CreateVolume parameters.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Block is true for a raw block volume.
	Block bool `json:"block,omitempty"`
	// AccessMode is the CSI access mode the volume was created with.
	AccessMode string `json:"accessMode,omitempty"`
	// Published maps node ID -> read-only flag of ControllerPublish.
	Published map[string]bool `json:"published,omitempty"`
	// NodePublished holds target paths published by NodePublishVolume.
	NodePublished []string `json:"nodePublished,omitempty"`
}

// Store is the set of volumes, safe for concurrent use. With a file, every
// mutation is written to it before the mutating call returns.
type Store struct {
	mu      sync.Mutex
	path    string
	volumes map[string]*Volume // by ID
	next    int
}

type fileFormat struct {
	Next    int       `json:"next"`
	Volumes []*Volume `json:"volumes"`
}

// Open returns a Store persisted at path (loaded when it exists), or an
// in-memory store when path is empty.
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
	for _, v := range f.Volumes {
		s.volumes[v.ID] = v
	}
	s.next = f.Next
	return s, nil
}

// Update runs fn with exclusive access to the volumes and persists the result
// when fn returns nil. fn may add, change or delete entries of vols; newID
// returns a fresh volume ID.
func (s *Store) Update(fn func(vols map[string]*Volume, newID func() string) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	snapshot := s.copyLocked()
	next := s.next
	err := fn(s.volumes, func() string {
		s.next++
		return fmt.Sprintf("vol-%06d", s.next)
	})
	if err == nil {
		err = s.saveLocked()
	}
	if err != nil {
		s.volumes, s.next = snapshot, next
	}
	return err
}

// View runs fn with read access to the volumes; fn must not modify them.
func (s *Store) View(fn func(vols map[string]*Volume)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.volumes)
}

// List returns a deep copy of all volumes sorted by ID.
func (s *Store) List() []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Volume, 0, len(s.volumes))
	for _, v := range s.copyLocked() {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Store) copyLocked() map[string]*Volume {
	out := make(map[string]*Volume, len(s.volumes))
	for id, v := range s.volumes {
		out[id] = v.Clone()
	}
	return out
}

// Clone returns a deep copy of v.
func (v *Volume) Clone() *Volume {
	c := *v
	c.Segment = cloneMap(v.Segment)
	c.Parameters = cloneMap(v.Parameters)
	if v.Published != nil {
		c.Published = make(map[string]bool, len(v.Published))
		for k, b := range v.Published {
			c.Published[k] = b
		}
	}
	c.NodePublished = append([]string(nil), v.NodePublished...)
	return &c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// saveLocked writes the state file atomically: a temporary file in the same
// directory, fsync, rename.
func (s *Store) saveLocked() error {
	if s.path == "" {
		return nil
	}
	f := fileFormat{Next: s.next}
	for _, v := range s.volumes {
		f.Volumes = append(f.Volumes, v)
	}
	sort.Slice(f.Volumes, func(i, j int) bool { return f.Volumes[i].ID < f.Volumes[j].ID })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".state-*")
	if err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}
