// Command etcd is the stock etcd server, built from its Go module so that the
// test kit's control plane gets the etcd 3.6 line that kube-apiserver expects.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
