// Package kubeletnode adds real nodes to the lab's control plane
// (test/harness/controlplane): per node a kubelet and a containerd of its own on
// this host, registered with the plane's API server, next to (or instead
// of) the fake Node objects of the other tests.
//
// Each node has its own directory (kubelet's root, containerd's root,
// state and socket, the pods' logs), its own kubelet ports on 127.0.0.1,
// its own cgroupRoot (cgroupfs driver on cgroup v1, failCgroupV1: false),
// and its own CNI bridge and pod subnet. Its kubelet and containerd run in
// a mount namespace of its own where /var/lib/kubelet and /var/lib/csi-mock
// are the node's (NodePaths), so that DaemonSets' hostPath volumes work as
// on machines of their own; its pods reach the API server at the
// kubernetes Service's address through a NAT rule of the node's. A
// host-wide slot (a lock file in the temp dir) keeps the bridges, subnets,
// NAT chains and cgroups of concurrent test processes apart, and lets the
// next run clean up after a killed one. docs/real-nodes.md lists the
// kubelet and containerd settings and why.
//
// The binaries come from the Go modules: kubelet from the control plane's
// nested module (the pinned k8s.io/kubernetes), containerd, its runc shim,
// ctr and the CNI plugins from the nested module mod/. BuildBinaries caches
// them like the control plane. runc, iptables, mount and ip come from the
// host's packages; CheckHost installs them with apt-get when missing.
//
// There is no registry: BuildImages builds the lab's images with
// tools/image (the pod sandbox image, images/cmd/pause, and a container
// that writes a file and reads it back, images/cmd/rwcheck, plus any of the
// project's commands), and every node imports them into containerd's
// k8s.io namespace. Pods use them with imagePullPolicy Never or
// IfNotPresent; the sandbox image is pinned in containerd's CRI
// configuration, so image garbage collection never removes it.
//
// Install applies a kustomization of deploy/ (MockOverlay, the kind quick
// start's) to the nodes as a vendor does, with the lab's images under the
// names it uses, and waits until it runs; AddReadBack gives a pod template
// a container that writes to a volume and reads it back (ReadBack).
//
// Where the host cannot run a node (not root, cgroup v1 controllers
// missing, runc not installable) AddNodes fails and says why: tests that
// need real nodes fail there, they never skip.
package kubeletnode
