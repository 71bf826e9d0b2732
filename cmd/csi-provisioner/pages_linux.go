package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseBinaryPages hands back the resident pages of the process's own
// binary: its read-only private mappings (code, read-only data, the function
// tables) that hold no private copy of a page. Package initialisation alone
// (client-go registers every API group of its clientset) touches most of the
// binary, and the kernel maps 64 KiB around each page touched, so a process
// that starts keeps some 25 MB of its binary resident that it never runs
// again.
//
// MADV_PAGEOUT unmaps those pages and drops them from the page cache, where
// the process owns its binary or could open it for writing (deploy/ runs node
// instances as root, the binary's owner) and no other process maps them;
// MADV_DONTNEED then unmaps what it left, which stays in the page cache, the
// first memory the kernel reclaims. A page used afterwards comes back on
// first use, from the page cache or the file. MADV_DONTNEED would also drop a
// private copy (a page the dynamic loader relocated in a PIE build, a
// debugger's breakpoint, a uprobe), which the file cannot give back: a
// mapping with any (Anonymous in smaps) is left alone. MADV_RANDOM last: a
// page read back from the file comes alone rather than with the kernel's
// read-around, so that what comes back is what the process uses, about 15 MB
// of the binary while it provisions rather than 21 MB.
func releaseBinaryPages() (pageRelease, error) {
	var r pageRelease
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return r, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return r, err
	}
	maps, err := binaryMappings(smaps, exe)
	if err != nil {
		return r, err
	}
	if len(maps) == 0 {
		return r, fmt.Errorf("no read-only mapping of %s without private pages in /proc/self/smaps", exe)
	}
	for _, m := range maps {
		r.Before += m.rss
		size := m.end - m.start
		// EINVAL before Linux 5.4: MADV_DONTNEED alone then.
		_ = madvise(m.start, size, unix.MADV_PAGEOUT)
		if err := madvise(m.start, size, unix.MADV_DONTNEED); err != nil {
			return r, fmt.Errorf("madvise(MADV_DONTNEED) on %s at %#x: %w", exe, m.start, err)
		}
		_ = madvise(m.start, size, unix.MADV_RANDOM)
		r.Mapped += int64(size)
	}
	if smaps, err = os.ReadFile("/proc/self/smaps"); err != nil {
		return r, err
	}
	after, err := binaryMappings(smaps, exe)
	for _, m := range after {
		r.After += m.rss
	}
	return r, err
}

// mapping is one mapping of the binary in /proc/self/smaps: [start, end)
// and its resident and private (Anonymous) bytes.
type mapping struct {
	start, end     uintptr
	rss, anonymous int64
}

// binaryMappings returns the mappings of file exe in smaps (the format of
// /proc/<pid>/smaps) that are neither writable nor shared and hold no
// private copy of a page. readlink(/proc/self/exe) and the mappings both
// end in " (deleted)" once the binary is replaced on disk; the second form
// is accepted for a replacement between the two reads.
func binaryMappings(smaps []byte, exe string) ([]mapping, error) {
	var found []mapping
	cur := -1 // index in found of the mapping whose fields follow, if it is the binary's
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		if name, value, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, " ") {
			// "Rss:    1234 kB", one of the fields of the mapping above.
			if cur >= 0 && (name == "Rss" || name == "Anonymous") {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/self/smaps: %q: %w", line, err)
				}
				if name == "Rss" {
					found[cur].rss = kb << 10
				} else {
					found[cur].anonymous = kb << 10
				}
			}
			continue
		}
		// address perms offset dev inode path: a new mapping.
		cur = -1
		m, path, perms, err := mappingHeader(line)
		if err != nil {
			return nil, err
		}
		if perms[1] != 'w' && perms[3] == 'p' && (path == exe || path == exe+" (deleted)") {
			found, cur = append(found, m), len(found)
		}
	}
	out := found[:0]
	for _, m := range found {
		if m.anonymous == 0 {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// mappingHeader parses the first line of a mapping in /proc/<pid>/smaps:
// its address range, its path (the rest of the line after the inode, "" for
// anonymous memory) and its permissions ("r-xp").
func mappingHeader(line string) (mapping, string, string, error) {
	f := strings.Fields(line)
	if len(f) < 5 || len(f[1]) != 4 {
		return mapping{}, "", "", fmt.Errorf("/proc/self/smaps: unexpected line %q", line)
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if !ok || err1 != nil || err2 != nil || end <= start {
		return mapping{}, "", "", fmt.Errorf("/proc/self/smaps: bad address range %q", f[0])
	}
	// The path starts after the inode field and may hold spaces.
	rest := line
	for range 5 {
		rest = strings.TrimLeft(rest, " ")
		if i := strings.IndexByte(rest, ' '); i >= 0 {
			rest = rest[i:]
		} else {
			rest = ""
		}
	}
	return mapping{start: uintptr(start), end: uintptr(end)}, strings.TrimLeft(rest, " "), f[1], nil
}

// madvise advises the kernel on [addr, addr+size) of this process's own
// mappings. The raw system call takes the address as a number: the range
// is not Go memory.
func madvise(addr, size uintptr, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, addr, size, uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}
