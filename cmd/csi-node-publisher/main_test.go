package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodepublisher"
)

// shortTempDir returns a temporary directory whose name is short enough for
// a unix socket path (t.TempDir's names carry the test's name).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pub")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// get answers a GET of path from h.
func get(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

// missingLines returns the lines of want that body lacks.
func missingLines(body string, want []string) []string {
	have := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		have[l] = true
	}
	var missing []string
	for _, w := range want {
		if !have[w] {
			missing = append(missing, w)
		}
	}
	return missing
}

// The endpoint's /healthz follows the publisher and its /metrics carries
// the publisher's metrics: before the driver is connected, after a publish,
// and after the driver went away.
func TestHTTPEndpoint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := filepath.Join(shortTempDir(t), "csi.sock")
	d, err := driver.New(driver.Config{Endpoint: "unix://" + sock, Mode: driver.ModeNode, NodeID: "n1",
		NodeTopology: map[string]string{"zone": "z1"}, MaxVolumesPerNode: 3})
	if err != nil {
		t.Fatal(err)
	}
	driverCtx, cancelDriver := context.WithCancel(ctx)
	driverDone := make(chan error, 1)
	go func() { driverDone <- d.Run(driverCtx) }()
	stopDriver := sync.OnceValue(func() error { cancelDriver(); return <-driverDone })
	t.Cleanup(func() { _ = stopDriver() })
	<-d.Ready()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}})

	reg := metrics.NewKubeRegistry()
	pubMetrics := nodepublisher.NewPublisherMetrics(reg)
	var health publisherHealth
	h := httpHandler(health.check, reg)
	var pub *nodepublisher.Publisher

	steps := []struct {
		name        string
		do          func(t *testing.T)
		wantHealth  int
		wantReason  string // a substring of /healthz's answer
		wantMetrics []string
	}{
		{
			name:        "driver not connected yet",
			wantHealth:  503,
			wantReason:  "not connected",
			wantMetrics: []string{"csi_node_publisher_driver_up 0"},
		},
		{
			name: "published",
			do: func(t *testing.T) {
				pub, err = nodepublisher.NewPublisher(nodepublisher.PublisherConfig{NodeName: "n1"}, client,
					struct {
						csi.IdentityClient
						csi.NodeClient
					}{csi.NewIdentityClient(conn), csi.NewNodeClient(conn)}, pubMetrics)
				if err != nil {
					t.Fatal(err)
				}
				health.pub.Store(pub)
				if err := pub.PublishOnce(ctx); err != nil {
					t.Fatal(err)
				}
			},
			wantHealth: 200,
			wantReason: "ok",
			wantMetrics: []string{
				"csi_node_publisher_driver_up 1",
				"csi_node_publisher_allocatable_count 3",
				`csi_node_publisher_publish_total{result="success"} 1`,
			},
		},
		{
			name: "driver gone",
			do: func(t *testing.T) {
				if err := stopDriver(); err != nil {
					t.Fatal(err)
				}
				if err := pub.PublishOnce(ctx); err == nil {
					t.Fatal("PublishOnce without a driver succeeded")
				}
			},
			wantHealth: 503,
			wantReason: "CSI driver unreachable",
			wantMetrics: []string{
				"csi_node_publisher_driver_up 0",
				`csi_node_publisher_publish_total{result="success"} 1`,
				`csi_node_publisher_publish_total{result="error"} 1`,
			},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.do != nil {
				s.do(t)
			}
			if code, body := get(h, "/healthz"); code != s.wantHealth || !strings.Contains(body, s.wantReason) {
				t.Errorf("/healthz = %d %q, want %d with %q", code, body, s.wantHealth, s.wantReason)
			}
			code, body := get(h, "/metrics")
			if missing := missingLines(body, s.wantMetrics); code != 200 || len(missing) > 0 {
				t.Errorf("/metrics = %d, lacking %q:\n%s", code, missing, body)
			}
		})
	}
}

// writeKubeconfig writes a kubeconfig of an apiserver that is never called.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunHTTPEndpoint(t *testing.T) {
	kubeconfig := writeKubeconfig(t)
	noDriver := filepath.Join(shortTempDir(t), "csi.sock")
	t.Run("address in use fails at once", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		cfg := config{csiAddress: noDriver, kubeconfig: kubeconfig, kubeAPIQPS: 5, kubeAPIBurst: 10,
			httpEndpoint: busy.Addr().String(), publisher: nodepublisher.PublisherConfig{NodeName: "n1"}}
		if err := run(ctx, cfg); err == nil || !strings.Contains(err.Error(), "--http-endpoint") {
			t.Errorf("run = %v, want an error about --http-endpoint", err)
		}
	})
	t.Run("serves while waiting for the driver", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		// A free port: listen, note it, close.
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		cfg := config{csiAddress: noDriver, kubeconfig: kubeconfig, kubeAPIQPS: 5, kubeAPIBurst: 10,
			httpEndpoint: addr, publisher: nodepublisher.PublisherConfig{NodeName: "n1"}}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- run(runCtx, cfg) }()
		defer func() { cancel(); <-done }()

		var code int
		var body string
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/healthz", nil)
			if err != nil {
				return false, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil // not listening yet
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			code, body = resp.StatusCode, string(data)
			return true, nil
		})
		if err != nil || code != 503 || !strings.Contains(body, "not connected") {
			t.Errorf("/healthz while the driver is missing = %d %q, %v; want 503, not connected", code, body, err)
		}
	})
}
