// Command etcd is etcd's own main, built from the pinned go.etcd.io module
// for the local test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
