package main

import (
	"os"
	"testing"
)

func TestReadOnlyMappings(t *testing.T) {
	maps := `00400000-01411000 r-xp 00000000 fe:00 99 /bin/csi-provisioner
01411000-02528000 r--p 01011000 fe:00 99 /bin/csi-provisioner
02528000-025c2000 rw-p 02128000 fe:00 99 /bin/csi-provisioner
025c2000-0460d000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--s 00000000 fe:00 99 /bin/csi-provisioner
7f0000002000-7f0000003000 r--p 00000000 fe:00 12 /lib/other.so
7f0000004000-7f0000005000 r-xp 00000000 fe:00 99 /bin/csi-provisioner (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
`
	got, err := readOnlyMappings([]byte(maps), "/bin/csi-provisioner")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uintptr{{0x400000, 0x1411000}, {0x1411000, 0x2528000}, {0x7f0000004000, 0x7f0000005000}}
	if len(got) != len(want) {
		t.Fatalf("readOnlyMappings = %#x, want %#x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d = %#x, want %#x", i, got[i], want[i])
		}
	}
	if _, err := readOnlyMappings([]byte("zz-01 r-xp 0 fe:00 99 /bin/csi-provisioner\n"), "/bin/csi-provisioner"); err == nil {
		t.Error("readOnlyMappings accepted a bad address range")
	}
}

// The test binary releases its own pages: fewer of them stay resident, and
// the code keeps running (pages come back on use).
func TestReleaseBinaryPages(t *testing.T) {
	r, err := releaseBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if r.Mapped <= 0 || r.Mapped > exe.Size()+1<<20 {
		t.Errorf("advised %d bytes of mappings, want more than 0 and about the binary's %d", r.Mapped, exe.Size())
	}
	if r.Before <= 0 || r.After >= r.Before {
		t.Errorf("resident file pages %d before, %d after: want fewer after", r.Before, r.After)
	}
	t.Logf("advised %s MB; resident file pages %s MB before, %s MB after", mb(r.Mapped), mb(r.Before), mb(r.After))
}
