package scheduler

import (
	"errors"
	"testing"

	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/utils/ptr"
)

func TestScoreWeights(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	w.add(t, w.nodes, node("limited", "z1"), node("free", "z2"))
	w.add(t, w.csiNodes, csiNode("limited", ptr.To[int32](10), driver), csiNode("free", nil, driver))
	w.add(t, w.capacities, capacity("fast", "z1", 20*gi), capacity("fast", "z2", 40*gi))
	w.add(t, w.claims, claim("b", "fast", 8*gi))
	// Capacity left: limited 12/20, free 32/40. Attach slots left after the
	// pod: limited 9/10, free has no limit.
	tests := []struct {
		name        string
		weights     ScoreWeights
		wantLimited int64
		wantFree    int64
	}{
		{name: "zero value means the defaults: capacity only", wantLimited: 60, wantFree: 80},
		{name: "capacity only", weights: ScoreWeights{FreeCapacity: 5}, wantLimited: 60, wantFree: 80},
		{name: "headroom only", weights: ScoreWeights{VolumeHeadroom: 1}, wantLimited: 90, wantFree: 100},
		{name: "equal weights", weights: ScoreWeights{FreeCapacity: 1, VolumeHeadroom: 1}, wantLimited: 75, wantFree: 90},
		{name: "capacity weighs three times", weights: ScoreWeights{FreeCapacity: 3, VolumeHeadroom: 1}, wantLimited: 67, wantFree: 85},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := w.coreWith(t, Config{Driver: driver, ScoreWeights: tc.weights}, nil)
			podVols, err := c.PodVolumes(pod("pb", "b"))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Score(podVols, node("limited", "z1")); got != tc.wantLimited {
				t.Errorf("limited scores %d, want %d", got, tc.wantLimited)
			}
			if got := c.Score(podVols, node("free", "z2")); got != tc.wantFree {
				t.Errorf("free scores %d, want %d", got, tc.wantFree)
			}
		})
	}
}

// Other pods' reservations on the node take attach slots from the headroom.
func TestHeadroomCountsReservations(t *testing.T) {
	_, c := limitWorld(t, 10)
	c.cfg.ScoreWeights = ScoreWeights{VolumeHeadroom: 1}
	n1 := node("n1", "z1")
	podVols, err := c.PodVolumes(pod("p", "new1"))
	if err != nil {
		t.Fatal(err)
	}
	// 2 counted + 1 new of 10.
	if got := c.Score(podVols, n1); got != 70 {
		t.Errorf("score %d, want 70", got)
	}
	other, err := c.PodVolumes(pod("r", "new2"))
	if err != nil {
		t.Fatal(err)
	}
	c.Reserve(other, n1)
	if got := c.Score(podVols, n1); got != 60 {
		t.Errorf("score with another pod's reservation %d, want 60", got)
	}
}

func TestScoreWeightsValidate(t *testing.T) {
	tests := []struct {
		name    string
		weights ScoreWeights
		wantErr bool
	}{
		{name: "defaults", weights: DefaultScoreWeights()},
		{name: "headroom only", weights: ScoreWeights{VolumeHeadroom: 2}},
		{name: "both zero", weights: ScoreWeights{}, wantErr: true},
		{name: "negative capacity", weights: ScoreWeights{FreeCapacity: -1, VolumeHeadroom: 1}, wantErr: true},
		{name: "negative headroom", weights: ScoreWeights{FreeCapacity: 1, VolumeHeadroom: -1}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.weights.Validate()
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrScoreWeights)) {
				t.Errorf("Validate = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	w := newWorld(t)
	_, err := New(Config{Driver: driver, ScoreWeights: ScoreWeights{FreeCapacity: -1}}, Listers{
		Claims: corelisters.NewPersistentVolumeClaimLister(w.claims), Volumes: corelisters.NewPersistentVolumeLister(w.volumes),
		Classes: storagelisters.NewStorageClassLister(w.classes), CSINodes: storagelisters.NewCSINodeLister(w.csiNodes),
	}, nil, nil)
	if !errors.Is(err, ErrScoreWeights) {
		t.Errorf("New with a negative weight: %v, want %v", err, ErrScoreWeights)
	}
}
