package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuMillis returns the CPU time (user + system, all threads) that process
// pid has used so far, in milliseconds (10 ms resolution).
func cpuMillis(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad CPU times %q %q", pid, fields[11], fields[12])
	}
	return float64(utime+stime) * 1000 / clockTicks, nil
}

// peakRSSMB returns the peak resident set size (VmHWM) of process pid in MB
// (10^6 bytes).
func peakRSSMB(pid int) (float64, error) { return statusMB(pid, "VmHWM") }

// rssMB returns the current resident set size (VmRSS) of process pid in MB.
func rssMB(pid int) (float64, error) { return statusMB(pid, "VmRSS") }

// statusMB returns a field of /proc/<pid>/status given in kB, in MB.
func statusMB(pid int, field string) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status %s %q: %w", pid, field, v, err)
			}
			return kb * 1024 / 1e6, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() ([3]float64, error) {
	var out [3]float64
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out, err
	}
	fields := strings.Fields(string(data))
	for i := 0; i < 3 && i < len(fields); i++ {
		out[i], _ = strconv.ParseFloat(fields[i], 64)
	}
	return out, nil
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs      int    `json:"cpus"`
	Model     string `json:"model"`
	GoVersion string `json:"goVersion"`
}

func thisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Model: "unknown", GoVersion: runtime.Version()}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			m.Model = strings.TrimSpace(v)
			break
		}
	}
	return m
}

// rssSplitMB returns the current anonymous (heap, stacks) and file-backed
// (the binary's pages) resident memory of process pid in MB.
func rssSplitMB(pid int) (anon, file float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			continue
		}
		switch k {
		case "RssAnon":
			anon = kb * 1024 / 1e6
		case "RssFile":
			file = kb * 1024 / 1e6
		}
	}
	return anon, file
}
