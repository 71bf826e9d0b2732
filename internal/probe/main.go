package main

import (
	_ "github.com/container-storage-interface/spec/lib/go/csi"
	_ "github.com/kubernetes-csi/csi-lib-utils/connection"
	_ "github.com/kubernetes-csi/csi-lib-utils/leaderelection"
	_ "github.com/kubernetes-csi/csi-lib-utils/metrics"
	_ "github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	_ "github.com/kubernetes-csi/csi-lib-utils/rpc"
	_ "github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	_ "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/component-helpers/scheduling/corev1"
	_ "k8s.io/kube-scheduler/extender/v1"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {}
