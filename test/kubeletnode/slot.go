package kubeletnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
			return &slot{index: i, f: f}, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking slot %d: %w", i, err)
		}
	}
	return nil, fmt.Errorf("all %d real-node slots of this host are taken", maxSlots)
}

func (s *slot) release() {
	_ = syscall.Flock(int(s.f.Fd()), syscall.LOCK_UN)
	s.f.Close()
}
