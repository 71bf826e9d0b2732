package controlplane

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsNeverRepeat picks many addresses: none twice, each
// bindable, and each below the ephemeral range when one lies there. Before
// FreePorts remembered its picks, the kernel's port-0 picks repeated within a
// few thousand calls.
func TestFreePortsNeverRepeat(t *testing.T) {
	seen := map[string]bool{}
	high := min(ephemeralLow(), pickHigh)
	for range 3000 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if high-pickLow >= 1000 && (port < pickLow || port >= high) {
			t.Fatalf("%s outside [%d, %d)", addr, pickLow, high)
		}
	}
	ln, err := net.Listen("tcp", mustFreeAddr(t))
	if err != nil {
		t.Fatalf("a picked address cannot be bound: %v", err)
	}
	ln.Close()
}

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
