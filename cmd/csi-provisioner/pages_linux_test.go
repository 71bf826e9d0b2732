package main

import (
	"os"
	"testing"
)

func TestBinaryMappings(t *testing.T) {
	smaps := `00400000-01411000 r-xp 00000000 fe:00 99     /bin/csi provisioner
Size:              16452 kB
Rss:               11776 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw
01411000-02528000 r--p 01011000 fe:00 99     /bin/csi provisioner
Rss:               11676 kB
Anonymous:             0 kB
02528000-02530000 r--p 02128000 fe:00 99     /bin/csi provisioner
Rss:                 148 kB
Anonymous:           148 kB
02530000-025c2000 rw-p 02130000 fe:00 99     /bin/csi provisioner
Rss:                 488 kB
Anonymous:           300 kB
025c2000-0460d000 rw-p 00000000 00:00 0
Rss:                 136 kB
Anonymous:           136 kB
7f0000000000-7f0000001000 r--s 00000000 fe:00 99     /bin/csi provisioner
Rss:                   4 kB
Anonymous:             0 kB
7f0000002000-7f0000003000 r--p 00000000 fe:00 12     /lib/other.so
Rss:                   4 kB
Anonymous:             0 kB
7f0000004000-7f0000005000 r-xp 00000000 fe:00 99     /bin/csi provisioner (deleted)
Rss:                   4 kB
Anonymous:             0 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  16 kB
Anonymous:            16 kB
`
	got, err := binaryMappings([]byte(smaps), "/bin/csi provisioner")
	if err != nil {
		t.Fatal(err)
	}
	// Neither the relocated read-only part (private copies), nor anything
	// writable, shared, or of another file.
	want := []mapping{
		{start: 0x400000, end: 0x1411000, rss: 11776 << 10},
		{start: 0x1411000, end: 0x2528000, rss: 11676 << 10},
		{start: 0x7f0000004000, end: 0x7f0000005000, rss: 4 << 10},
	}
	if len(got) != len(want) {
		t.Fatalf("binaryMappings = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{
		"zz-01 r-xp 0 fe:00 99 /bin/csi provisioner\n",
		"00400000-01411000 r-xp 00000000 fe:00 99 /bin/csi provisioner\nRss: many kB\n",
	} {
		if _, err := binaryMappings([]byte(bad), "/bin/csi provisioner"); err == nil {
			t.Errorf("binaryMappings accepted %q", bad)
		}
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
		t.Errorf("resident pages of the binary %d before, %d after: want fewer after", r.Before, r.After)
	}
	t.Logf("advised %s MB; resident pages of the binary %s MB before, %s MB after", mb(r.Mapped), mb(r.Before), mb(r.After))
}
