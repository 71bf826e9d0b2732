package controlplane

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports for the control plane's and the labs' processes are picked here,
// then bound by a process started later, often several times over (an
// instance restarted on its node's address). Two hazards lie between the pick and each bind:
//
//   - the kernel hands a port out again once the listener that found it is
//     closed, so two picks of one process could get the same port, and two
//     of the lab's processes the same address (seen: node-4's and node-5's
//     instances of test/e2enode on one port, each failing while the other
//     ran);
//   - every outgoing TCP connection of the machine takes a local port from
//     the same ephemeral range as a bind to port 0, and may hold it for
//     minutes (a watch) while the lab's process is down between restarts.
//
// So FreePorts never returns a port twice in a process, and picks below the
// ephemeral range (net.ipv4.ip_local_port_range), where no outgoing
// connection takes ports; each pick is bound once to check that no other
// process holds it.
var picked = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts picks from pickLow up to pickHigh (below Kubernetes' default
// NodePort range) or the ephemeral range's start, whichever is lower.
const pickLow, pickHigh = 20000, 30000

// FreePorts returns n free ports of 127.0.0.1 that no earlier call of this
// process returned (see above).
func FreePorts(n int) ([]int, error) {
	picked.Lock()
	defer picked.Unlock()
	high := min(ephemeralLow(), pickHigh)
	var ports []int
	for range 1000 * n {
		if len(ports) == n {
			break
		}
		port := 0 // the kernel's pick, when no range lies below the ephemeral one
		if high-pickLow >= 1000 {
			port = pickLow + rand.IntN(high-pickLow)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // held by another process
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !picked.ports[port] {
			picked.ports[port] = true
			ports = append(ports, port)
		}
	}
	if len(ports) < n {
		return nil, errors.New("no free port on 127.0.0.1 that this process has not handed out already")
	}
	return ports, nil
}

// FreeAddr is FreePorts(1) as the address 127.0.0.1:port.
func FreeAddr() (string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return low
}
