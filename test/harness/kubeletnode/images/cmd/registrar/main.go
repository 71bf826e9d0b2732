// Command registrar is the lab's stand-in for node-driver-registrar, which
// the Go module proxy the project builds from does not serve: it asks the
// CSI driver on --csi-address for its name (GetPluginInfo), then serves
// kubelet's plugin registration API (pluginregistration/v1) on
// <--registration-dir>/<driver>-reg.sock, announcing a CSI plugin whose
// socket kubelet finds at --kubelet-registration-path. Kubelet then calls
// the driver's NodeGetInfo and writes the driver's entry in the node's
// CSINode. The flags are upstream's that deploy/ uses (--http-endpoint
// serves /healthz, 200 while the registration socket is served; -v is
// accepted); it runs until SIGTERM and removes its socket.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type server struct {
	registration.UnimplementedRegistrationServer
	name, endpoint string
}

// GetInfo announces the driver to kubelet.
func (s *server) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{Type: registration.CSIPlugin, Name: s.name, Endpoint: s.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

// NotifyRegistrationStatus logs kubelet's answer; a refusal ends the
// process, as upstream's does, so that the pod restarts it.
func (s *server) NotifyRegistrationStatus(_ context.Context, st *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if !st.PluginRegistered {
		fmt.Fprintln(os.Stderr, "kubelet refused the registration:", st.Error)
		os.Exit(1)
	}
	fmt.Println("registered with kubelet:", s.name)
	return &registration.RegistrationStatusResponse{}, nil
}

func main() {
	csiAddress := flag.String("csi-address", "/csi/csi.sock", "The CSI driver's socket in this container.")
	endpoint := flag.String("kubelet-registration-path", "", "The CSI driver's socket on the node, as kubelet finds it.")
	regDir := flag.String("registration-dir", "/registration", "Kubelet's plugin registration directory in this container.")
	httpEndpoint := flag.String("http-endpoint", "", "Address of /healthz, e.g. :9810 (empty: none).")
	flag.Int("v", 0, "Log verbosity (accepted, as upstream's).")
	flag.Parse()
	if *httpEndpoint != "" {
		go serveHealth(*httpEndpoint)
	}
	if err := run(*csiAddress, *endpoint, *regDir); err != nil {
		fmt.Fprintln(os.Stderr, "registrar:", err)
		os.Exit(1)
	}
}

// serveHealth answers /healthz with 200 (the process serves registration
// as long as it runs).
func serveHealth(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "registrar: health endpoint:", err)
		os.Exit(1)
	}
}

func run(csiAddress, endpoint, regDir string) error {
	name, err := driverName(csiAddress)
	if err != nil {
		return err
	}
	sock := filepath.Join(regDir, name+"-reg.sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	srv := grpc.NewServer()
	registration.RegisterRegistrationServer(srv, &server{name: name, endpoint: endpoint})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; srv.Stop() }()
	fmt.Println("serving kubelet's registration on", sock, "for", name)
	return srv.Serve(l)
}

// driverName asks the driver its name, retrying until it answers (it may
// start after this container).
func driverName(csiAddress string) (string, error) {
	conn, err := grpc.NewClient("unix://"+csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
		if err == nil {
			return info.GetName(), nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("the driver on %s never answered GetPluginInfo: %w", csiAddress, err)
		}
		time.Sleep(time.Second)
	}
}
