package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
)

// quietFlagSet is newFlagSet without usage output on errors.
func quietFlagSet(t *testing.T) *flag.FlagSet {
	t.Helper()
	var c config
	fs, _ := newFlagSet(&c)
	fs.SetOutput(io.Discard)
	return fs
}

// Every flag of upstream's csi-provisioner is known to ours, once, with
// upstream's default unless the table says ours differs.
func TestUpstreamFlagsKnown(t *testing.T) {
	fs := quietFlagSet(t)
	seen := map[string]bool{}
	for _, u := range upstreamFlags {
		t.Run(u.name, func(t *testing.T) {
			if seen[u.name] {
				t.Fatalf("--%s is listed twice", u.name)
			}
			seen[u.name] = true
			f := fs.Lookup(u.name)
			if f == nil {
				t.Fatalf("--%s is not a flag of csi-provisioner", u.name)
			}
			want := u.upstreamDefault
			if u.ourDefault != "" {
				if u.status != compatDiffers {
					t.Errorf("--%s has a default of its own but status %q, want %q", u.name, u.status, compatDiffers)
				}
				want = u.ourDefault
			}
			if f.DefValue != want {
				t.Errorf("--%s default = %q, want %q", u.name, f.DefValue, want)
			}
			if u.status != compatSame && u.status != compatAdded && u.note == "" {
				t.Errorf("--%s (%s) has no note saying why", u.name, u.status)
			}
		})
	}
}

// A flag accepted only at its default refuses any other value with one
// line naming it; an ignored flag accepts any value upstream accepts.
func TestUpstreamOnlyFlagValues(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "master", args: []string{"--master=https://10.0.0.1:6443"}, wantErr: "--master=https://10.0.0.1:6443 is not supported: "},
		{name: "capacity for immediate binding", args: []string{"--capacity-for-immediate-binding"}, wantErr: "--capacity-for-immediate-binding=true is not supported: "},
		{name: "leader election labels", args: []string{"--leader-election-labels=a:b"}, wantErr: "--leader-election-labels=a:b is not supported: "},
		{name: "thread counts", args: []string{"--cloning-protection-threads=4", "--capacity-threads=2", "--worker-threads=10"}},
		{name: "negative thread count", args: []string{"--cloning-protection-threads=-1"}, wantErr: "invalid value"},
		{name: "zero worker threads", args: []string{"--worker-threads=0"}, wantErr: "--worker-threads must be positive"},
		{name: "snapshot sweep", args: []string{"--snapshot-orphan-sweep-interval=0"}},
		{name: "volume mode conversion", args: []string{"--prevent-volume-mode-conversion=false"}},
		{name: "automaxprocs", args: []string{"--automaxprocs"}},
		{name: "automaxprocs off", args: []string{"--automaxprocs=false"}},
		{name: "upstream capacity client", args: []string{"--kube-api-capacity-qps=1", "--kube-api-capacity-burst=5"}},
		{name: "metrics address", args: []string{"--metrics-address=:8080", "--metrics-path=/m"}},
		{name: "metrics address and http endpoint", args: []string{"--metrics-address=:8080", "--http-endpoint=:8081"}, wantErr: "only one of --metrics-address and --http-endpoint can be set"},
		{name: "pprof", args: []string{"--enable-pprof", "--http-endpoint=:8080"}},
		{name: "read-only publish", args: []string{"--controller-publish-readonly"}},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "flag provided but not defined: -no-such-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseArgs(tc.args, io.Discard)
			checkErr(t, err, tc.wantErr)
		})
	}
}

// --node-deployment needs $NODE_NAME and excludes leader election; its
// tuning flags parse as upstream's and are checked against each other.
func TestNodeDeploymentFlags(t *testing.T) {
	tests := []struct {
		name     string
		nodeName string
		args     []string
		wantErr  string
		want     nodedeploy.Config
	}{
		{name: "without NODE_NAME", args: []string{"--node-deployment"},
			wantErr: "--node-deployment needs the NODE_NAME environment variable"},
		{name: "defaults", nodeName: "n1", args: []string{"--node-deployment"},
			want: nodedeploy.Config{NodeName: "n1", ImmediateBinding: true, BaseDelay: 20 * time.Second, MaxDelay: time.Minute}},
		{name: "tuned", nodeName: "n1", args: []string{"--node-deployment", "--node-deployment-immediate-binding=false", "--node-deployment-base-delay=1s", "--node-deployment-max-delay=2m"},
			want: nodedeploy.Config{NodeName: "n1", BaseDelay: time.Second, MaxDelay: 2 * time.Minute}},
		{name: "with leader election", nodeName: "n1", args: []string{"--node-deployment", "--leader-election"},
			wantErr: "--node-deployment and --leader-election=true exclude each other"},
		{name: "max below base", nodeName: "n1", args: []string{"--node-deployment", "--node-deployment-base-delay=2m", "--node-deployment-max-delay=1m"},
			wantErr: "--node-deployment-base-delay must be positive and at most --node-deployment-max-delay"},
		{name: "selection by label", nodeName: "n1", args: []string{"--node-deployment", "--node-deployment-selection=label"},
			want: nodedeploy.Config{NodeName: "n1", ImmediateBinding: true, BaseDelay: 20 * time.Second, MaxDelay: time.Minute, LabelSelection: true}},
		{name: "unknown selection", nodeName: "n1", args: []string{"--node-deployment", "--node-deployment-selection=field"},
			wantErr: `--node-deployment-selection="field": want all or label`},
		{name: "off, tuning accepted", args: []string{"--node-deployment=false", "--node-deployment-base-delay=1s", "--leader-election"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", tc.nodeName)
			c, _, err := parseArgs(tc.args, io.Discard)
			checkErr(t, err, tc.wantErr)
			if err == nil && c.nodeDeployment {
				if diff := cmp.Diff(tc.want, c.node, cmpopts.IgnoreUnexported(nodedeploy.Config{})); diff != "" {
					t.Errorf("node deployment (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// --feature-gates takes upstream's gates: the ones implemented or without
// effect are accepted, the others refused with the gate's name and why.
func TestFeatureGates(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		wantErr string
	}{
		{name: "topology on", value: "Topology=true"},
		{name: "topology off", value: "Topology=false", wantErr: "feature gate Topology=false is not supported: GA; csi-provisioner is topology-aware"},
		{name: "release on exit", value: "ReleaseLeaderElectionOnExit=true"},
		{name: "release on exit off", value: "ReleaseLeaderElectionOnExit=false"},
		{name: "several", value: "Topology=true, ReleaseLeaderElectionOnExit=true,VolumeAttributesClass=false"},
		{name: "cross namespace sources", value: "CrossNamespaceVolumeDataSource=true", wantErr: "feature gate CrossNamespaceVolumeDataSource=true is not supported: alpha; data sources in another namespace"},
		{name: "volume attributes classes", value: "VolumeAttributesClass=true"},
		{name: "all alpha", value: "AllAlpha=true", wantErr: "feature gate AllAlpha=true is not supported"},
		{name: "all beta", value: "AllBeta=true"},
		{name: "unknown gate", value: "Snapshots=true", wantErr: `unknown feature gate "Snapshots"`},
		{name: "no value", value: "Topology", wantErr: "missing bool value for Topology"},
		{name: "not a bool", value: "Topology=yes", wantErr: "invalid value of Topology=yes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseArgs([]string{"--feature-gates=" + tc.value}, io.Discard)
			checkErr(t, err, tc.wantErr)
		})
	}
}

// sampleArgs are the csi-provisioner args of one of upstream's sample
// Deployments (testdata/upstream-v6.3.0-args.yaml).
type sampleArgs struct {
	Source string            `json:"source"`
	Args   []string          `json:"args"`
	Env    map[string]string `json:"env"`
}

// The args of upstream's sample Deployments parse without a flag error, in
// their pod's environment. (None uses a flag csi-provisioner refuses.)
func TestUpstreamSampleArgs(t *testing.T) {
	data, err := os.ReadFile("testdata/upstream-v6.3.0-args.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var samples []sampleArgs
	if err := yaml.UnmarshalStrict(data, &samples); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		t.Run(s.Source, func(t *testing.T) {
			for _, k := range []string{"POD_NAME", "NAMESPACE"} {
				t.Setenv(k, s.Env[k])
			}
			args := make([]string, 0, len(s.Args))
			for _, a := range s.Args {
				args = append(args, expandEnv(a, s.Env))
			}
			_, _, err := parseArgs(args, io.Discard)
			checkErr(t, err, "")
		})
	}
}

// envRef is a $(VAR) reference in a container's args.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv replaces $(VAR) with env[VAR], as the kubelet expands a
// container's args (an unknown reference stays as it is).
func expandEnv(arg string, env map[string]string) string {
	return envRef.ReplaceAllStringFunc(arg, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// checkErr asserts err contains want (no error when want is empty) and is
// one line.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("error = %v, want none", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want one with %q", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error has more than one line: %q", err)
	}
}

// The owner of capacity objects: --capacity-owner-deployment, or
// --capacity-ownerref-level levels up from the pod, upstream's default 1
// when the pod is known.
func TestOwnerLevel(t *testing.T) {
	pod := config{podName: "p", podNamespace: "ns", capacityOwnerLevel: 1}
	pod.capacity.Namespace = "ns"
	with := func(f func(*config)) config { c := pod; f(&c); return c }
	tests := []struct {
		name    string
		cfg     config
		want    int
		wantErr string
	}{
		{name: "upstream's default with a known pod", cfg: pod, want: 1},
		{name: "no pod, no flag", cfg: with(func(c *config) { c.podName = "" }), want: -1},
		{name: "level given", cfg: with(func(c *config) { c.capacityOwnerLevel, c.capacityOwnerLevelSet = 2, true }), want: 2},
		{name: "no owner", cfg: with(func(c *config) { c.capacityOwnerLevel, c.capacityOwnerLevelSet = -1, true }), want: -1},
		{name: "level given, no pod", cfg: with(func(c *config) { c.podName, c.capacityOwnerLevelSet = "", true }),
			wantErr: "--capacity-ownerref-level=1 needs the POD_NAME and NAMESPACE environment variables"},
		{name: "owner deployment", cfg: with(func(c *config) { c.capacityOwner = "d" }), want: -1},
		{name: "both", cfg: with(func(c *config) { c.capacityOwner, c.capacityOwnerLevelSet = "d", true }),
			wantErr: "only one of --capacity-owner-deployment and --capacity-ownerref-level can be set"},
		{name: "below -1", cfg: with(func(c *config) { c.capacityOwnerLevel, c.capacityOwnerLevelSet = -2, true }),
			wantErr: "-1 (no owner) is the smallest level"},
		{name: "objects in another namespace", cfg: with(func(c *config) { c.capacity.Namespace = "other" }),
			wantErr: `the owner lives in namespace "ns" ($NAMESPACE), not in --capacity-namespace "other"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.ownerLevel()
			checkErr(t, err, tc.wantErr)
			if err == nil && got != tc.want {
				t.Errorf("ownerLevel = %d, want %d", got, tc.want)
			}
		})
	}
}
