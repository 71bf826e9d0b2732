package kubeletnode

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// APIServiceIP is the kubernetes Service's cluster IP in the lab's plane
// (the first address of its --service-cluster-ip-range), which kubelet
// gives every container as KUBERNETES_SERVICE_HOST, port 443.
const APIServiceIP = "10.96.0.1"

// chain is the node's NAT chain: what a kube-proxy would do for the one
// Service pods of the lab use, the API server's.
func (n *Node) chain() string { return "CSITP-" + strings.TrimPrefix(n.Bridge, "csitp") }

// routeAPIService makes the kubernetes Service reachable from the node's
// pods, as kube-proxy makes it on a real node: it creates the node's bridge
// (the CNI bridge plugin then uses it), lets it route to loopback
// (route_localnet), and DNATs what the node's pods send to
// APIServiceIP:443 to the API server on 127.0.0.1. Nothing leaves the host:
// the rule matches only packets that come in from the node's bridge. The
// API server's serving certificate names APIServiceIP, so in-cluster
// clients verify it as in a cluster.
func (n *Node) routeAPIService(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return err
	}
	n.removeAPIServiceRoute()
	if err := run("ip", "link", "add", n.Bridge, "type", "bridge"); err != nil {
		return err
	}
	if err := run("ip", "link", "set", n.Bridge, "up"); err != nil {
		return err
	}
	sysctl := filepath.Join("/proc/sys/net/ipv4/conf", n.Bridge, "route_localnet")
	if err := os.WriteFile(sysctl, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("route_localnet on %s: %w", n.Bridge, err)
	}
	to := u.Hostname() + ":" + u.Port()
	for _, args := range [][]string{
		{"-t", "nat", "-N", n.chain()},
		{"-t", "nat", "-A", n.chain(), "-d", APIServiceIP + "/32", "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", to},
		{"-t", "nat", "-A", "PREROUTING", "-i", n.Bridge, "-j", n.chain()},
	} {
		if err := run("iptables", args...); err != nil {
			return err
		}
	}
	return nil
}

// removeAPIServiceRoute removes the node's NAT chain and its jump, if any.
func (n *Node) removeAPIServiceRoute() {
	_ = run("iptables", "-t", "nat", "-D", "PREROUTING", "-i", n.Bridge, "-j", n.chain())
	_ = run("iptables", "-t", "nat", "-F", n.chain())
	_ = run("iptables", "-t", "nat", "-X", n.chain())
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
