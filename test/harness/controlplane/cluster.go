package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Options configure a Cluster.
type Options struct {
	// RepoRoot is the project's root; default RepoRoot().
	RepoRoot string
	// SchedulerBinary replaces the stock kube-scheduler (e.g. the project's
	// csi-topology-scheduler).
	SchedulerBinary string
	// SchedulerConfig is an optional KubeSchedulerConfiguration (YAML);
	// "{{KUBECONFIG}}" in it is replaced by the admin kubeconfig's path.
	SchedulerConfig string
	// StartTimeout bounds start-up; default 2 minutes.
	StartTimeout time.Duration
	// Controllers are kube-controller-manager's controllers; default
	// DefaultControllers.
	Controllers []string
	// SnapshotCRDs installs the VolumeSnapshot CRDs of the pinned
	// external-snapshotter client module (see InstallSnapshotCRDs).
	SnapshotCRDs bool
	// AuditPolicy, when set, is a kube-apiserver audit policy (YAML, kind
	// Policy of audit.k8s.io/v1): kube-apiserver then writes its audit log,
	// one JSON event a line, to Cluster.AuditLog.
	AuditPolicy string
	// ControllerManagerArgs are extra kube-controller-manager flags, after
	// the plane's (e.g. a higher --kube-api-qps, so that the PV controller's
	// default 20 requests/s do not pace a benchmark).
	ControllerManagerArgs []string
	// APIServerArgs are extra kube-apiserver flags, after the plane's (e.g.
	// --feature-gates=CrossNamespaceVolumeDataSource=true for an alpha API
	// field the API server drops without it).
	APIServerArgs []string
}

// DefaultControllers are the kube-controller-manager controllers (names
// from cmd/kube-controller-manager/names) that act on what the tests create,
// as a real cluster's do. Without a kubelet no pod runs, so the controllers
// of running workloads (endpoints, node lifecycle, attach/detach, the root
// CA publisher for pods' service-account volumes) stay off. Read only.
var DefaultControllers = []string{
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"serviceaccount-controller",
	"statefulset-controller",
	// Deleting a namespace deletes its contents, and then the namespace.
	"namespace-controller",
	// ownerReferences: a StatefulSet's pods, capacity objects owned by the
	// provisioner's Deployment, CSINodes owned by their Node.
	"garbage-collector-controller",
}

// Cluster is a running local control plane.
type Cluster struct {
	// Dir is the cluster's temp dir; LogDir holds each component's log.
	Dir, LogDir string
	// Kubeconfig is the admin kubeconfig file.
	Kubeconfig string
	// RESTConfig and Client act as cluster admin.
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// RepoRoot is the project's root.
	RepoRoot string
	// AuditLog is kube-apiserver's audit log (with Options.AuditPolicy
	// only; empty otherwise).
	AuditLog string

	server string
	mu     sync.Mutex
	// core are the control-plane processes in start order; procs are the
	// processes started with StartProcess.
	core    []*Process
	procs   []*Process
	stopped bool
	// keepLogs: Stop leaves LogDir, which DumpLogs pointed to.
	keepLogs bool
	// onStop run first in Stop, last registered first.
	onStop []func() error
	// the scheduler's command line, for RestartScheduler.
	sched           *Process
	schedBinary     string
	schedArgs       []string
	schedPort       int
	schedRestarts   int
	schedKubeconfig string
	// kube-controller-manager's command line, for StartControllerManager.
	kcm         *Process
	kcmBinary   string
	kcmArgs     []string
	kcmPort     int
	kcmRestarts int
}

// Start builds (or reuses) the binaries and starts a control plane. On error
// everything started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	logger := klog.FromContext(ctx)
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	bins, err := BuildControlPlane(ctx, opts.RepoRoot)
	if err != nil {
		return nil, err
	}
	if opts.SchedulerBinary != "" {
		bins.Scheduler = opts.SchedulerBinary
	}
	dir, err := os.MkdirTemp("", "csi-topology-cp-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, LogDir: filepath.Join(dir, "logs"), RepoRoot: opts.RepoRoot}
	defer func() {
		if err != nil {
			// An interrupted start-up is no crash: no logs to show.
			if ctx.Err() == nil {
				c.DumpLogs(os.Stderr, 30)
			}
			_ = c.Stop()
			c = nil
		}
	}()
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return c, err
	}
	start := time.Now()
	ports, err := FreePorts(3)
	if err != nil {
		return c, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	token, err := c.startAPIServer(opts, bins, etcdClient, etcdPeer, apiPort)
	if err != nil {
		return c, err
	}
	sctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := c.waitHealthy(sctx, c.server+"/readyz", token); err != nil {
		return c, fmt.Errorf("kube-apiserver not ready: %w", err)
	}
	// The controllers' ports are picked just before they listen, not
	// before the API server's start-up: in those seconds another test
	// package's process could take a port picked free.
	ctlPorts, err := FreePorts(2)
	if err != nil {
		return c, err
	}
	if err := c.startControllers(sctx, opts, bins, ctlPorts[0], ctlPorts[1]); err != nil {
		return c, err
	}
	logger.Info("Control plane ready", "dir", dir, "server", c.server, "startup", time.Since(start).Round(time.Millisecond))
	return c, nil
}

// setDefaults fills the options a caller left empty.
func (o *Options) setDefaults() (err error) {
	if o.RepoRoot == "" {
		if o.RepoRoot, err = RepoRoot(); err != nil {
			return err
		}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if len(o.Controllers) == 0 {
		o.Controllers = DefaultControllers
	}
	return nil
}

// startAPIServer starts etcd and kube-apiserver (with the audit log of
// opts.AuditPolicy) and sets the cluster's admin client, REST config and
// kubeconfig. It returns the admin token; the API server may not be ready
// yet.
func (c *Cluster) startAPIServer(opts Options, bins Binaries, etcdClient, etcdPeer, apiPort int) (string, error) {
	token, err := c.writeCredentials()
	if err != nil {
		return "", err
	}
	c.server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := c.startCore("etcd", bins.Etcd, c.etcdArgs(etcdClient, etcdPeer)...); err != nil {
		return "", err
	}
	apiArgs := append(c.apiserverArgs(etcdClient, apiPort), opts.APIServerArgs...)
	if opts.AuditPolicy != "" {
		audit, err := c.auditArgs(opts.AuditPolicy)
		if err != nil {
			return "", err
		}
		apiArgs = append(apiArgs, audit...)
	}
	if err := c.startCore("kube-apiserver", bins.APIServer, apiArgs...); err != nil {
		return "", err
	}
	c.RESTConfig = &rest.Config{
		Host:            c.server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             200,
		Burst:           400,
	}
	if c.Client, err = kubernetes.NewForConfig(c.RESTConfig); err != nil {
		return "", err
	}
	if c.Kubeconfig, err = c.writeKubeconfig("admin.kubeconfig", token); err != nil {
		return "", err
	}
	return token, nil
}

// startControllers starts kube-controller-manager and the first
// kube-scheduler on a ready API server, waits until both are healthy and
// the default ServiceAccount exists, and installs the snapshot CRDs when
// opts asks for them.
func (c *Cluster) startControllers(ctx context.Context, opts Options, bins Binaries, kcmPort, schedPort int) error {
	c.kcmBinary, c.kcmArgs, c.kcmPort = bins.ControllerManager, append(c.controllerManagerArgs(opts.Controllers, kcmPort), opts.ControllerManagerArgs...), kcmPort
	if err := c.startCore("kube-controller-manager", c.kcmBinary, c.kcmArgs...); err != nil {
		return err
	}
	c.kcm = c.core[len(c.core)-1]
	if err := c.startFirstScheduler(bins.Scheduler, opts.SchedulerConfig, schedPort); err != nil {
		return err
	}
	for name, port := range map[string]int{"kube-controller-manager": kcmPort, "kube-scheduler": schedPort} {
		if err := c.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", ""); err != nil {
			return fmt.Errorf("%s not healthy: %w", name, err)
		}
	}
	if err := c.WaitFor(ctx, opts.StartTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("default ServiceAccount never appeared: %w", err)
	}
	if opts.SnapshotCRDs {
		if err := c.InstallSnapshotCRDs(ctx); err != nil {
			return err
		}
	}
	return nil
}

// etcdArgs is etcd's command line.
func (c *Cluster) etcdArgs(client, peer int) []string {
	clientURL, peerURL := "http://127.0.0.1:"+strconv.Itoa(client), "http://127.0.0.1:"+strconv.Itoa(peer)
	return []string{
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync", "--quota-backend-bytes=4294967296",
	}
}

// apiserverArgs is kube-apiserver's command line.
func (c *Cluster) apiserverArgs(etcdClient, port int) []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdClient),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
		"--token-auth-file=" + filepath.Join(c.Dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + filepath.Join(c.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(c.Dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--enable-priority-and-fairness=false",
		"--allow-privileged=true",
	}
}

// auditArgs writes the audit policy and returns kube-apiserver's audit
// flags: a JSON log in the cluster's dir, written as requests complete
// (blocking mode, so that a request is in the log once it has been
// answered), never rotated.
func (c *Cluster) auditArgs(policy string) ([]string, error) {
	path := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	c.AuditLog = filepath.Join(c.LogDir, "audit.log")
	return []string{
		"--audit-policy-file=" + path, "--audit-log-path=" + c.AuditLog,
		"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0",
	}, nil
}

// controllerManagerArgs is kube-controller-manager's command line.
func (c *Cluster) controllerManagerArgs(controllers []string, port int) []string {
	return []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.Dir, "kcm-certs"),
		"--pvclaimbinder-sync-period=2s",
		// The CA of kube-apiserver's self-signed serving certificate (it
		// writes the CA after the serving certificate), which the root CA
		// publisher (when in Options.Controllers) puts in every namespace's
		// kube-root-ca.crt ConfigMap, for pods' service-account volumes.
		"--root-ca-file=" + filepath.Join(c.Dir, "apiserver-certs", "apiserver.crt"),
	}
}

// startFirstScheduler starts the scheduler with an optional configuration
// (Options.SchedulerConfig) and keeps its command line for StartScheduler.
func (c *Cluster) startFirstScheduler(binary, config string, port int) error {
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.Dir, "scheduler-certs"),
	}
	if config != "" {
		path := filepath.Join(c.Dir, "scheduler-config.yaml")
		data := strings.ReplaceAll(config, "{{KUBECONFIG}}", c.Kubeconfig)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			return err
		}
		args = append(args, "--config="+path)
	}
	c.schedBinary, c.schedArgs, c.schedPort = binary, args, port
	if err := c.startCore("kube-scheduler", binary, args...); err != nil {
		return err
	}
	c.sched = c.core[len(c.core)-1]
	return nil
}

func (c *Cluster) startCore(name, binary string, args ...string) error {
	p, err := startProcess(c.LogDir, name, binary, args, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.core = append(c.core, p)
	c.mu.Unlock()
	return nil
}

// Scheduler returns the running scheduler process (the stock kube-scheduler
// or Options.SchedulerBinary), e.g. to read its CPU time from /proc.
func (c *Cluster) Scheduler() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sched
}

// StopScheduler stops the scheduler (SIGTERM): what it held only in memory
// (assumed pods, a plugin's reservations) is gone, as after a crash or a
// leader change. StartScheduler starts it again with the same command line
// and waits until it is healthy.
func (c *Cluster) StopScheduler() {
	c.mu.Lock()
	p := c.sched
	c.mu.Unlock()
	if p != nil {
		p.Stop(15 * time.Second)
	}
}

// SetSchedulerConfig replaces the scheduler's KubeSchedulerConfiguration
// ({{KUBECONFIG}} as in Options.SchedulerConfig) for the next
// StartScheduler; its leaderElection then applies (say leaderElect: false
// to keep it off).
func (c *Cluster) SetSchedulerConfig(config string) error {
	path := filepath.Join(c.Dir, fmt.Sprintf("scheduler-config-%d.yaml", c.schedRestarts+1))
	c.mu.Lock()
	kubeconfig := c.schedKubeconfig
	c.mu.Unlock()
	if kubeconfig == "" {
		kubeconfig = c.Kubeconfig
	}
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(config, "{{KUBECONFIG}}", kubeconfig)), 0o600); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The file decides everything it sets: kube-scheduler lets an explicit
	// --leader-elect override the file's leaderElection, so drop it.
	args := []string{}
	for _, a := range c.schedArgs {
		if !strings.HasPrefix(a, "--config=") && !strings.HasPrefix(a, "--leader-elect=") {
			args = append(args, a)
		}
	}
	c.schedArgs = append(args, "--config="+path)
	return nil
}

// SetSchedulerCredentials makes the next StartScheduler use kubeconfig for
// its API client and its delegated authentication and authorization
// (--kubeconfig, --authentication-kubeconfig, --authorization-kubeconfig),
// e.g. a ServiceAccount's, so it runs under that account's RBAC. A
// configuration file's clientConnection.kubeconfig must name it too
// ({{KUBECONFIG}} is replaced by it in SetSchedulerConfig afterwards).
func (c *Cluster) SetSchedulerCredentials(kubeconfig string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.schedKubeconfig = kubeconfig
	for i, a := range c.schedArgs {
		for _, flag := range []string{"--kubeconfig=", "--authentication-kubeconfig=", "--authorization-kubeconfig="} {
			if strings.HasPrefix(a, flag) {
				c.schedArgs[i] = flag + kubeconfig
			}
		}
	}
}

// StartScheduler starts the scheduler after StopScheduler; its log is
// kube-scheduler-<n>.log.
func (c *Cluster) StartScheduler(ctx context.Context) error {
	c.mu.Lock()
	if c.sched != nil && !c.sched.Exited() {
		c.mu.Unlock()
		return fmt.Errorf("the scheduler is running")
	}
	c.schedRestarts++
	name := fmt.Sprintf("kube-scheduler-%d", c.schedRestarts)
	c.mu.Unlock()
	p, err := startProcess(c.LogDir, name, c.schedBinary, c.schedArgs, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for i, q := range c.core {
		if q == c.sched {
			c.core[i] = p
		}
	}
	c.sched = p
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return c.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(c.schedPort)+"/healthz", "")
}

// writeCredentials generates the service-account key pair and the admin
// token file, and returns the admin token.
func (c *Cluster) writeCredentials() (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := hex.EncodeToString(raw)
	line := token + `,admin,admin,"system:masters"` + "\n"
	return token, os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(line), 0o600)
}

// waitHealthy polls an HTTPS health endpoint until it answers 200.
func (c *Cluster) waitHealthy(ctx context.Context, url, token string) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // local test plane, self-signed
	}}
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.checkCoreAlive(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w (last answer: %s)", url, err, last)
	}
	return nil
}

func (c *Cluster) checkCoreAlive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.core {
		if p.Exited() {
			return fmt.Errorf("%s exited: %v (log: %s)", p.Name, p.waitErr, p.LogPath())
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig(file, token string) (string, error) {
	path := filepath.Join(c.Dir, file)
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: user
  user:
    token: %s
contexts:
- name: local
  context:
    cluster: local
    user: user
current-context: local
`, c.server, token)
	return path, os.WriteFile(path, []byte(data), 0o600)
}

// OnStop registers f to run at the start of Stop, before any process is
// stopped (the last registered first), e.g. to stop real nodes while the
// API server still answers them. Stop reports f's error.
func (c *Cluster) OnStop(f func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onStop = append(c.onStop, f)
}

// Stop runs the OnStop functions, stops the processes started with
// StartProcess, then the scheduler and controller manager, then
// kube-apiserver, then etcd (SIGTERM, SIGKILL after 15 s), and removes the
// temp dir, all of it but LogDir once DumpLogs pointed there. It is
// idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	procs, core, onStop := c.procs, c.core, c.onStop
	c.mu.Unlock()
	var errs []error
	for i := len(onStop) - 1; i >= 0; i-- {
		if err := onStop[i](); err != nil {
			errs = append(errs, err)
		}
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(15 * time.Second) }()
	}
	wg.Wait()
	for i := len(core) - 1; i >= 0; i-- {
		core[i].Stop(15 * time.Second)
	}
	return errors.Join(append(errs, c.removeDir())...)
}

// removeDir removes the temp dir, or all of it but LogDir once DumpLogs
// pointed there.
func (c *Cluster) removeDir() error {
	c.mu.Lock()
	keep := c.keepLogs
	c.mu.Unlock()
	if !keep {
		return os.RemoveAll(c.Dir)
	}
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if path := filepath.Join(c.Dir, e.Name()); path != c.LogDir {
			errs = append(errs, os.RemoveAll(path))
		}
	}
	return errors.Join(errs...)
}

// DumpLogs writes where the logs are and the last lines of each; Stop
// leaves them there.
func (c *Cluster) DumpLogs(w io.Writer, lines int) {
	c.mu.Lock()
	c.keepLogs = true
	all := append(append([]*Process(nil), c.core...), c.procs...)
	c.mu.Unlock()
	fmt.Fprintf(w, "control plane logs in %s\n", c.LogDir)
	for _, p := range all {
		fmt.Fprintf(w, "--- last %d lines of %s (%s)\n", lines, p.Name, p.LogPath())
		p.tail(w, lines)
	}
}

// StartProcess starts one of the project's binaries (or anything else) with
// its log in LogDir/<name>.log; Stop stops it with the cluster.
func (c *Cluster) StartProcess(name, binary string, args, env []string) (*Process, error) {
	p, err := startProcess(c.LogDir, name, binary, args, env)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// WaitFor polls cond every 200 ms until it returns true, an error, or
// timeout passes.
func (c *Cluster) WaitFor(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond)
}
