#!/usr/bin/env bash
# Follows the README's Install in empty modules outside the repository: examples/basic with the
# core alone, and examples/cluster with etcdcoord and an embedded etcd. Each program is copied
# as a user would copy it, the module requires the library through a replace of this clone, and
# the program is built and run. A program that imports something under internal/, or an Install
# line that no longer works, fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
GO=${GO:-go}
export GOWORK=off
GROCKSDB=${GROCKSDB:-v1.7.15} # the README's line for RocksDB 7.8.3
ETCD=v3.6.16                  # the etcd release etcdcoord is tested with
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# try NAME [etcd]: copies examples/NAME into an empty module, follows the Install, builds and runs.
try() {
	local name=$1 dir=$tmp/$1
	mkdir "$dir"
	cp "examples/$name"/*.go "$dir"
	(
		cd "$dir"
		"$GO" mod init example.com/"$name" >/dev/null 2>&1
		"$GO" mod edit -replace "github.com/recordlock/recordlock=$TOP"
		"$GO" get "github.com/linxGnu/grocksdb@$GROCKSDB"
		if [ "${2:-}" = etcd ]; then
			"$GO" mod edit -replace "github.com/recordlock/recordlock/etcdcoord=$TOP/etcdcoord"
			"$GO" get "go.etcd.io/etcd/client/v3@$ETCD" "go.etcd.io/etcd/server/v3@$ETCD"
		fi
		"$GO" mod tidy
		"$GO" build -o "$tmp/$name.bin" .
	)
	echo "== $name, copied into an empty module: built; running it"
	"$tmp/$name.bin" >"$tmp/$name.out" || { cat "$tmp/$name.out"; exit 1; }
	tail -n 2 "$tmp/$name.out"
}

try basic
try cluster etcd
echo "install-check: passed"
