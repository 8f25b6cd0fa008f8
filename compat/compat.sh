#!/usr/bin/env bash
# `make compat`: builds and vets every module, and runs the tests of the root package and of
# etcdcoord, against the RocksDB of Debian's next stable release with the grocksdb release made
# for it, then prints the RocksDB version the library reported at run time.
#
# Nothing is installed. The library, the libraries it links, and a C library new enough for them
# are downloaded with apt under a private configuration (its own sources list, state and cache;
# of the machine's apt setup it takes only the Debian mirror and its keyring) and unpacked into
# .compat/. Programs are linked with an rpath and a dynamic linker in that folder, so they load
# those libraries and not the machine's. Each module's go.compat.mod (and .sum) is its go.mod
# with grocksdb raised to $GROCKSDB; `compat/compat.sh mod` rewrites them from the go.mod files
# after a dependency changes.
set -euo pipefail

RELEASE=trixie  # the Debian release whose RocksDB is tested
ROCKSDB=9.10    # the RocksDB of that release: its library package is librocksdb$ROCKSDB
GROCKSDB=v1.9.8 # the grocksdb release for that RocksDB
GO=${GO:-go}
export GOWORK=off # each module alone, with its go.compat.mod: -modfile does not work in a workspace

cd "$(dirname "$0")/.."
TOP=$PWD
DIR=$TOP/.compat
ROOT=$DIR/root                      # the unpacked packages
LIB=$ROOT/usr/lib/x86_64-linux-gnu # where the release's amd64 packages put their libraries
LOADER=$ROOT/usr/lib64/ld-linux-x86-64.so.2
MODULES=$(find . -name go.mod -not -path './.git/*' -not -path './.compat/*' -exec dirname {} \; | sort)

# write_modfiles makes each module's go.compat.mod and go.compat.sum from its go.mod.
write_modfiles() {
	local m
	for m in $MODULES; do
		(
			cd "$m"
			cp go.mod go.compat.mod
			cp go.sum go.compat.sum
			"$GO" mod edit -modfile=go.compat.mod -require="github.com/linxGnu/grocksdb@$GROCKSDB"
			"$GO" mod tidy -modfile=go.compat.mod
		)
		echo "wrote $m/go.compat.mod"
	done
}

# sources lists the machine's enabled deb sources, one "URI SUITE COMPONENT KEYRING" line for
# each suite and component, from the one-line and the deb822 files apt reads. KEYRING is the
# Signed-By file, or - when the source names none.
sources() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '{ sub(/#.*/, "") }
		$1 == "deb" {
			key = "-"; i = 2
			if ($2 ~ /^\[/) { # options, [a=b c=d]
				for (; i <= NF; i++) {
					o = $i; gsub(/[][]/, "", o)
					if (o ~ /^signed-by=/) key = substr(o, 11)
					if ($i ~ /\]$/) { i++; break }
				}
			}
			for (j = i + 2; j <= NF; j++) print $i, $(i + 1), $j, key
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk 'BEGIN { RS = ""; FS = "\n" }
		{
			split("", v); name = ""
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^#/) continue
				if ($i ~ /^[ \t]/) { v[name] = v[name] " " $i; continue } # a continued field
				p = index($i, ":"); if (p == 0) continue
				name = tolower(substr($i, 1, p - 1)); v[name] = substr($i, p + 1)
			}
			if (tolower(v["enabled"]) ~ /no/ || (" " v["types"] " ") !~ /[ \t]deb[ \t]/) next
			key = v["signed-by"]; gsub(/^[ \t]+|[ \t]+$/, "", key)
			if (key !~ /^\/[^ \t]*$/) key = "-" # none, or a key written inline
			nu = split(v["uris"], uris, /[ \t]+/)
			ns = split(v["suites"], suites, /[ \t]+/)
			nc = split(v["components"], comps, /[ \t]+/)
			for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++) for (c = 1; c <= nc; c++)
				if (uris[a] != "" && suites[b] != "" && comps[c] != "") print uris[a], suites[b], comps[c], key
		}' "$f"
	done
}

# apt_config writes the private apt configuration: the mirror and keyring of the machine's own
# release, with the release name swapped for $RELEASE; state and cache under .compat/apt.
apt_config() {
	local codename uri key
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	read -r uri key < <(sources | awk -v rel="$codename" '$2 == rel && $3 == "main" { print $1, $4; exit }') || true
	if [ -z "${uri:-}" ]; then
		echo "compat: no deb source for '$codename' main in /etc/apt; cannot tell which Debian mirror to use" >&2
		exit 1
	fi
	rm -rf "$DIR/apt"
	mkdir -p "$DIR/apt/empty" "$DIR/apt/state/lists/partial" "$DIR/apt/cache/archives/partial"
	: >"$DIR/apt/state/status"
	local opts=""
	[ "$key" != - ] && opts="[signed-by=$key] "
	echo "deb $opts$uri $RELEASE main" >"$DIR/apt/sources.list"
	cat >"$DIR/apt/apt.conf" <<-EOF
		Dir::Etc::main "/dev/null";
		Dir::Etc::parts "$DIR/apt/empty";
		Dir::Etc::sourcelist "$DIR/apt/sources.list";
		Dir::Etc::sourceparts "$DIR/apt/empty";
		Dir::Etc::preferences "/dev/null";
		Dir::Etc::preferencesparts "$DIR/apt/empty";
		Dir::State "$DIR/apt/state";
		Dir::State::status "$DIR/apt/state/status";
		Dir::Cache "$DIR/apt/cache";
		APT::Architecture "amd64";
		APT::Architectures { "amd64"; };
		APT::Sandbox::User "$(id -un)";
		Acquire::Languages "none";
	EOF
	echo "compat: $RELEASE from the mirror of this machine's $codename sources"
}

# depends prints the packages a package depends on, the first of each set of alternatives.
depends() {
	apt-cache show --no-all-versions "$1" | sed -n 's/^Depends: //p' | tr ',' '\n' |
		sed 's/|.*//; s/(.*)//; s/:any//; s/[[:space:]]//g' | grep .
}

# fetch downloads librocksdb-dev, the library package and what they depend on, and unpacks them
# into $ROOT. What the library package depends on includes its C and C++ runtime and the
# compression libraries; what librocksdb-dev depends on, the headers and link names of the
# latter. An unpacked tree of the same release and version is reused.
fetch() {
	local stamp="$RELEASE librocksdb$ROCKSDB"
	if [ -f "$ROOT/.complete" ] && [ "$(cat "$ROOT/.complete")" = "$stamp" ]; then
		return
	fi
	[ "$(dpkg --print-architecture)" = amd64 ] || { echo "compat: only amd64 is supported" >&2; exit 1; }
	apt_config
	export APT_CONFIG=$DIR/apt/apt.conf
	apt-get -q update
	local lib=librocksdb$ROCKSDB pkgs
	pkgs=$(
		{
			echo librocksdb-dev "$lib"
			depends librocksdb-dev
			depends "$lib"
		} | tr ' ' '\n' | sort -u
	)
	rm -rf "$DIR/debs" "$ROOT"
	mkdir -p "$DIR/debs" "$ROOT"
	# shellcheck disable=SC2086 # one package a word
	(cd "$DIR/debs" && apt-get -q download $pkgs)
	local deb
	for deb in "$DIR"/debs/*.deb; do
		dpkg-deb -x "$deb" "$ROOT"
	done
	echo "$stamp" >"$ROOT/.complete"
}

# run_checks builds and vets every module and tests the root package and etcdcoord with the
# unpacked libraries.
run_checks() {
	case $TOP in *[,\ ]*)
		echo "compat: the linker flags cannot carry a path with a comma or space: $TOP" >&2
		exit 1
		;;
	esac
	export CGO_CFLAGS="-I$ROOT/usr/include"
	# allow-shlib-undefined: the libraries need a newer C library than the one linked against,
	# which they find at run time. disable-new-dtags: an RPATH, which, unlike a RUNPATH, also
	# serves the libraries' own dependencies.
	export CGO_LDFLAGS="-L$LIB -Wl,--allow-shlib-undefined,--disable-new-dtags,-rpath,$LIB,--dynamic-linker=$LOADER"
	local m
	for m in $MODULES; do
		echo "== $m: build and vet"
		# -o /dev/null: go build of a module that is one main package (examples/cluster) would
		# leave its binary in the folder.
		(cd "$m" && "$GO" build -modfile=go.compat.mod -o /dev/null ./... && "$GO" vet -modfile=go.compat.mod ./...)
	done
	local out version libs
	out=$("$GO" run -modfile=go.compat.mod ./compat/rocksdbversion)
	echo "$out"
	version=$(sed -n 1p <<<"$out")
	libs=$(sed -n 2p <<<"$out")
	if [[ $version != "RocksDB $ROCKSDB."*", grocksdb $GROCKSDB" ||
		$libs != *" $LIB/librocksdb.so"*" $LIB/libc.so"* ]]; then
		echo "compat: expected RocksDB $ROCKSDB and a C library from $LIB, with grocksdb $GROCKSDB" >&2
		exit 1
	fi
	for m in . ./etcdcoord; do
		echo "== $m: test"
		(cd "$m" && "$GO" test -modfile=go.compat.mod -count=1 .)
	done
	echo "compat: passed against $version"
}

case ${1:-} in
mod) write_modfiles ;;
"")
	fetch
	run_checks
	;;
*)
	echo "usage: $0 [mod]" >&2
	exit 2
	;;
esac
