// Command etcd is the upstream etcd server, at the version the pinned Kubernetes release is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
