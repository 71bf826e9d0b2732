package kubeletnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// slotDir holds one lock file per slot. A slot is what real nodes must not
// share across the test processes of one host: the bridge csitp<i>, the
// subnet 10.244.<i>.0/24 and the cgroup csi-topology-<i>. A process holds
// its slots' locks while their nodes live; the kernel releases them when
// it dies, so a crashed run's slot is taken again (and cleaned first).
var slotDir = filepath.Join(os.TempDir(), "csi-topology-node-slots")

// maxSlots bounds the slots (and so the real nodes on one host).
const maxSlots = 200

type slot struct {
	index int
	f     *os.File
	// previous is what the slot's last holder recorded (record): its
	// node's directory, cgroupRoot and the cgroups it created above, one a
	// line.
	previous string
}

// takeSlot locks the first free slot.
func takeSlot() (*slot, error) {
	if err := os.MkdirAll(slotDir, 0o755); err != nil {
		return nil, err
	}
	for i := 1; i <= maxSlots; i++ {
		f, err := os.OpenFile(filepath.Join(slotDir, strconv.Itoa(i)+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			prev, err := io.ReadAll(f)
			if err != nil {
				f.Close()
				return nil, err
			}
			return &slot{index: i, f: f, previous: string(prev)}, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking slot %d: %w", i, err)
		}
	}
	return nil, fmt.Errorf("all %d real-node slots of this host are taken", maxSlots)
}

// record writes the node's directory, cgroupRoot and the cgroups it
// created above into the slot's lock file, for the next holder to clean up
// after a run that died without stopping its nodes.
func (s *slot) record(dir, cgroupRoot string, parents []string) error {
	if err := s.f.Truncate(0); err != nil {
		return err
	}
	_, err := s.f.WriteAt([]byte(strings.Join(append([]string{dir, cgroupRoot}, parents...), "\n")+"\n"), 0)
	return err
}

// stale is the node a dead holder of the slot left behind (recorded by
// record and never stopped), or nil.
func (s *slot) stale(host Host) *Node {
	lines := strings.Split(strings.TrimSpace(s.previous), "\n")
	if len(lines) < 2 || lines[0] == "" || lines[1] == "" {
		return nil
	}
	return &Node{Dir: lines[0], ContainerdSocket: filepath.Join(lines[0], "containerd.sock"), CgroupRoot: lines[1],
		Bridge: "csitp" + strconv.Itoa(s.index), host: host, cgroupParents: lines[2:]}
}

func (s *slot) release() {
	_ = syscall.Flock(int(s.f.Fd()), syscall.LOCK_UN)
	s.f.Close()
}
