package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testEpoch = time.Unix(1700000000, 0).UTC()

type tarEntry struct {
	Name     string
	Mode     int64
	Uid, Gid int
	Size     int64
	ModTime  time.Time
	Format   tar.Format
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{h.Name, h.Mode, h.Uid, h.Gid, h.Size, h.ModTime.UTC(), h.Format})
	}
}

func TestWriteTar(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    []tarEntry
	}{
		{
			name:    "base: sorted, root-owned but nonroot's home, sticky /tmp",
			entries: baseEntries(),
			want: []tarEntry{
				{Name: "etc/", Mode: 0o755},
				{Name: "etc/group", Mode: 0o644, Size: 27},
				{Name: "etc/passwd", Mode: 0o644, Size: 94},
				{Name: "home/", Mode: 0o755},
				{Name: "home/nonroot/", Mode: 0o700, Uid: NonRootUID, Gid: NonRootUID},
				{Name: "tmp/", Mode: 0o1777},
			},
		},
		{
			name:    "a binary copied from a file, its mode from the entry",
			entries: []entry{{name: "z", mode: 0o755, data: []byte("z")}, {name: "csi-provisioner", mode: 0o755, path: bin}},
			want: []tarEntry{
				{Name: "csi-provisioner", Mode: 0o755, Size: 7},
				{Name: "z", Mode: 0o755, Size: 1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := writeTar(&buf, tc.entries, testEpoch.Add(500*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i].ModTime, tc.want[i].Format = testEpoch, tar.FormatUSTAR
			}
			if diff := cmp.Diff(tc.want, readTar(t, &buf)); diff != "" {
				t.Errorf("tar entries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteLayerReproducible writes the same layer twice: the gzip files are
// byte for byte equal.
func TestWriteLayerReproducible(t *testing.T) {
	dir := t.TempDir()
	var files [2][]byte
	for i := range files {
		p := filepath.Join(dir, "l"+string(rune('0'+i)))
		lf, err := writeLayer(p, baseEntries(), testEpoch)
		if err != nil {
			t.Fatal(err)
		}
		if lf.uncompressed == 0 || lf.uncompressed%512 != 0 {
			t.Errorf("uncompressed size %d, want a positive multiple of 512", lf.uncompressed)
		}
		if files[i], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("two writes of the same layer differ")
	}
}

// TestWriteBaseFiles: the tar stream `image rootfs` gives the Dockerfile is,
// byte for byte, the uncompressed base layer of the images.
func TestWriteBaseFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "base.tar.gz")
	if _, err := writeLayer(p, baseEntries(), testEpoch); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteBaseFiles(&got, testEpoch); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), layer) {
		t.Errorf("WriteBaseFiles wrote %d bytes, not the base layer's %d", got.Len(), len(layer))
	}
}
