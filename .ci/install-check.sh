#!/usr/bin/env bash
# Follows the README's Install in one empty module outside the repository, in the order a newcomer
# takes: first a program that uses the core alone (examples/basic), then, in the same module, one
# that uses etcdcoord and an embedded etcd (examples/cluster). Each program is copied as a user
# would copy it, the module requires the library through a replace of this clone, and the program
# is built and run. After each round go.mod must hold the tested releases: grocksdb, etcd, and the
# grpc etcdcoord requires. A program that imports something under internal/, or an Install step
# that no longer works or no longer holds a version, fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
GO=${GO:-go}
export GOWORK=off
GROCKSDB=${GROCKSDB:-v1.7.15} # the README's line for RocksDB 7.8.3
ETCD=v3.6.16                  # the etcd release etcdcoord is tested with
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# version MODULE: the version of MODULE the module in the current folder builds with.
version() { "$GO" list -m -f '{{.Version}}' "$1"; }

# want MODULE VERSION: fails unless the current module builds with VERSION of MODULE.
want() {
	local got
	got=$(version "$1")
	if [ "$got" != "$2" ]; then
		echo "install-check: $1 is $got after the Install, want $2" >&2
		exit 1
	fi
	echo "   $1 $got"
}

GRPC=$(cd etcdcoord && version google.golang.org/grpc)
[ "$(cd etcdcoord && version go.etcd.io/etcd/client/v3)" = "$ETCD" ] ||
	{ echo "install-check: etcdcoord's go.mod does not require etcd $ETCD" >&2; exit 1; }

app=$tmp/app
mkdir "$app"
cd "$app"
"$GO" mod init example.com/app >/dev/null 2>&1

# install NAME [etcd]: the README's Install steps 1 to 4 for the program examples/NAME, in the
# module in the current folder, then builds and runs it.
install() {
	local name=$1
	# 1. Point the module paths at the clone.
	"$GO" mod edit -replace "github.com/recordlock/recordlock=$TOP"
	if [ "${2:-}" = etcd ]; then
		"$GO" mod edit -replace "github.com/recordlock/recordlock/etcdcoord=$TOP/etcdcoord"
	fi
	# 2. The code: the program, copied over whatever the module had.
	cp "$TOP/examples/$name"/*.go .
	# 3. The go get lines, after the code that imports what they pin.
	"$GO" get "github.com/linxGnu/grocksdb@$GROCKSDB"
	if [ "${2:-}" = etcd ]; then
		"$GO" get "go.etcd.io/etcd/client/v3@$ETCD" "go.etcd.io/etcd/server/v3@$ETCD"
	fi
	# 4.
	"$GO" mod tidy
	echo "== $name, copied into the module: go.mod holds"
	want github.com/linxGnu/grocksdb "$GROCKSDB"
	if [ "${2:-}" = etcd ]; then
		want go.etcd.io/etcd/client/v3 "$ETCD"
		want go.etcd.io/etcd/server/v3 "$ETCD"
		want google.golang.org/grpc "$GRPC"
	fi
	"$GO" build -o "$tmp/$name.bin" .
	echo "== $name: built; running it"
	"$tmp/$name.bin" >"$tmp/$name.out" || { cat "$tmp/$name.out"; exit 1; }
	tail -n 2 "$tmp/$name.out"
}

install basic
install cluster etcd
echo "install-check: passed"
