package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// SegmentTable is the content of a segment table file (--segments-file):
//
//	{"segments": [{"topology": {"zone": "z1"}, "capacityBytes": 10737418240},
//	              {"topology": {"zone": "z2"}}],
//	 "nodeLimits": {"node-1": 2}}
//
// Keys without '/' get TopologyPrefix; a segment without capacityBytes is
// unlimited; nodeLimits become Config.NodeLimits.
type SegmentTable struct {
	// Segments become Config.Segments.
	Segments []SegmentConfig `json:"segments"`
	// NodeLimits become Config.NodeLimits.
	NodeLimits map[string]int64 `json:"nodeLimits,omitempty"`
}

// UnmarshalJSON implements json.Unmarshaler: unknown fields are errors and
// a missing capacityBytes means unlimited.
func (s *SegmentConfig) UnmarshalJSON(data []byte) error {
	var raw struct {
		Topology      map[string]string `json:"topology"`
		CapacityBytes *int64            `json:"capacityBytes"`
	}
	if err := decodeStrict(data, &raw); err != nil {
		return err
	}
	*s = SegmentConfig{Topology: NormalizeSegment(raw.Topology), CapacityBytes: -1}
	if raw.CapacityBytes != nil {
		s.CapacityBytes = *raw.CapacityBytes
	}
	return nil
}

// ParseSegmentTable reads a segment table in JSON (see SegmentTable).
func ParseSegmentTable(data []byte) (SegmentTable, error) {
	var t SegmentTable
	if err := decodeStrict(data, &t); err != nil {
		return SegmentTable{}, fmt.Errorf("parsing segment table: %w", err)
	}
	if len(t.Segments) == 0 {
		return SegmentTable{}, errors.New("parsing segment table: no segments")
	}
	return t, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	return decodeStrictFrom(bytes.NewReader(data), v)
}

func decodeStrictFrom(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
