package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stat    string
		want    proc
		wantErr bool
	}{
		{
			name: "plain",
			stat: "4242 (etcd) S 4200 4200 4100 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 1234 0 0\n",
			want: proc{pid: 4242, ppid: 4200, pgrp: 4200, session: 4100, comm: "etcd", state: "S"},
		},
		{
			name: "command with spaces and parentheses",
			stat: "7 (a (b) c) Z 1 7 7 0",
			want: proc{pid: 7, ppid: 1, pgrp: 7, session: 7, comm: "a (b) c", state: "Z"},
		},
		{name: "truncated", stat: "7 (x) S 1", wantErr: true},
		{name: "no command", stat: "7 x S 1 7 7", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.stat))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(proc{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDescendants(t *testing.T) {
	all := []proc{{pid: 1}, {pid: 10, ppid: 1}, {pid: 11, ppid: 10}, {pid: 12, ppid: 11}, {pid: 20, ppid: 1}, {pid: 13, ppid: 10}}
	var got []int
	for _, p := range descendants(all, 10) {
		got = append(got, p.pid)
	}
	if diff := cmp.Diff([]int{11, 13, 12}, got); diff != "" {
		t.Errorf("descendants of 10 (-want +got):\n%s", diff)
	}
}
