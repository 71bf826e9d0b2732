package inflight

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestVolumeAbsent(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "invalid argument", err: status.Error(codes.InvalidArgument, "x"), want: true},
		{name: "resource exhausted", err: status.Error(codes.ResourceExhausted, "x"), want: true},
		{name: "internal", err: status.Error(codes.Internal, "x"), want: true},
		{name: "already exists", err: status.Error(codes.AlreadyExists, "x")},
		{name: "aborted", err: status.Error(codes.Aborted, "x")},
		{name: "deadline", err: status.Error(codes.DeadlineExceeded, "x")},
		{name: "unavailable", err: status.Error(codes.Unavailable, "x")},
		{name: "cancelled", err: status.Error(codes.Canceled, "x")},
		{name: "not a status", err: context.DeadlineExceeded},
		{name: "nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VolumeAbsent(tc.err); got != tc.want {
				t.Errorf("VolumeAbsent(%v) = %t, want %t", tc.err, got, tc.want)
			}
		})
	}
}
