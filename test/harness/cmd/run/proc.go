package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// proc is a process as /proc/<pid>/stat describes it.
type proc struct {
	pid, ppid, pgrp, session int
	comm                     string
	// state is R, S, D, Z (a zombie: ended, not yet waited for)...
	state string
}

// parseStat parses the content of /proc/<pid>/stat: "pid (comm) state ppid
// pgrp session ...", where comm may itself contain spaces and parentheses.
func parseStat(data []byte) (proc, error) {
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("malformed stat %q", data)
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 4 {
		return proc{}, fmt.Errorf("malformed stat %q", data)
	}
	// fields: state ppid pgrp session ...
	nums := []string{strings.TrimSpace(string(data[:open])), fields[1], fields[2], fields[3]}
	p := proc{comm: string(data[open+1 : end]), state: fields[0]}
	for i, dst := range []*int{&p.pid, &p.ppid, &p.pgrp, &p.session} {
		n, err := strconv.Atoi(nums[i])
		if err != nil {
			return proc{}, fmt.Errorf("malformed stat %q: %w", data, err)
		}
		*dst = n
	}
	return p, nil
}

// processes lists the system's processes; those that end while it reads
// are left out.
func processes() ([]proc, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	out := make([]proc, 0, len(stats))
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // ended meanwhile
		}
		p, err := parseStat(data)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// descendants returns the processes below pid (children, their children...).
func descendants(all []proc, pid int) []proc {
	children := map[int][]proc{}
	for _, p := range all {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		next := children[queue[0]]
		queue = queue[1:]
		for _, c := range next {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}
