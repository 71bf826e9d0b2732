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

func TestParseDispositions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  string
		want    dispositions
		wantErr bool
	}{
		{
			name:   "GNU make 4.3",
			status: "Name:\tmake\nSigQ:\t0/7823\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000010000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000001814207\n",
			want:   dispositions{caught: 0x1814207},
		},
		{name: "ignored", status: "SigIgn:\t0000000000000006\nSigCgt:\t0000000001814201\n", want: dispositions{caught: 0x1814201, ignored: 6}},
		{name: "no SigIgn", status: "SigCgt:\t0000000001814207\n", wantErr: true},
		{name: "malformed", status: "SigIgn:\tzz\nSigCgt:\t0000000001814207\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDispositions([]byte(tc.status))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDispositionsHandling checks which of make's fatal signals run watches:
// every one make did not find ignored, including one make already handles
// (no longer caught) when run starts.
func TestDispositionsHandling(t *testing.T) {
	const hup, intr, quit, term = 1 << 0, 1 << 1, 1 << 2, 1 << 14
	const all = hup | intr | quit | term
	for _, tc := range []struct {
		name string
		d    dispositions
		want uint64
	}{
		{name: "make catches all", d: dispositions{caught: all | 1<<16}, want: all},
		{name: "SIGINT and SIGQUIT ignored at make's start (a background job)", d: dispositions{caught: hup | term, ignored: intr | quit}, want: hup | term},
		{name: "make handles SIGINT already", d: dispositions{caught: hup | quit | term}, want: all},
		{name: "catches none", d: dispositions{caught: 1 << 16}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.handling(); got != tc.want {
				t.Errorf("handling() = %#x, want %#x", got, tc.want)
			}
		})
	}
}
