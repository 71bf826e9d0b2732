package main

import (
	"io"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestTarget(t *testing.T) {
	cases := []struct {
		args       []string
		kind, name string
		wantErr    bool
	}{
		{args: []string{"explain", "pvc/data"}, kind: "pvc", name: "data"},
		{args: []string{"explain", "persistentvolumeclaim/data"}, kind: "pvc", name: "data"},
		{args: []string{"explain", "pvc", "data"}, kind: "pvc", name: "data"},
		{args: []string{"explain", "pod/web-0"}, kind: "pod", name: "web-0"},
		{args: []string{"explain", "po", "web-0"}, kind: "pod", name: "web-0"},
		{args: []string{"explain", "pv/x"}, wantErr: true},
		{args: []string{"explain"}, wantErr: true},
		{args: []string{"describe", "pvc/data"}, wantErr: true},
	}
	for _, tc := range cases {
		kind, name, err := target(tc.args)
		if (err != nil) != tc.wantErr || kind != tc.kind || name != tc.name {
			t.Errorf("target(%q) = %q, %q, %v; want %q, %q, error %t", tc.args, kind, name, err, tc.kind, tc.name, tc.wantErr)
		}
	}
}

// TestNamespaceFromKubeconfig checks kubectl's conventions: -n wins, else
// the namespace of --context (or the current context), else "default".
func TestNamespaceFromKubeconfig(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["team"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "team-ns"}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "other-ns"}
	cfg.Contexts["bare"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "team"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", path}, "team-ns"},
		{[]string{"--kubeconfig", path, "--context", "other"}, "other-ns"},
		{[]string{"--kubeconfig", path, "--context", "bare"}, "default"},
		{[]string{"--kubeconfig", path, "-n", "mine"}, "mine"},
		{[]string{"--kubeconfig=" + path, "--namespace=mine", "--context=other"}, "mine"},
	}
	for _, tc := range cases {
		c, err := parseArgs(append(tc.args, "explain", "pvc/x"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		_, ns, err := client(&c)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if ns != tc.want {
			t.Errorf("%q: namespace %q, want %q", tc.args, ns, tc.want)
		}
	}
	if _, err := parseArgs([]string{"-o", "yaml"}, io.Discard); err == nil {
		t.Error("-o yaml accepted; want text or json only")
	}
}
