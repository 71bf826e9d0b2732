package kubeclient

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPodNamespace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "namespace")
	if err := os.WriteFile(file, []byte("csi-topology\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, file, want string
	}{
		{name: "environment first", env: "from-env", file: file, want: "from-env"},
		{name: "service account", file: file, want: "csi-topology"},
		{name: "outside a pod", file: filepath.Join(dir, "missing")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NAMESPACE", tc.env)
			if got := PodNamespace(tc.file); got != tc.want {
				t.Errorf("PodNamespace = %q, want %q", got, tc.want)
			}
		})
	}
}
