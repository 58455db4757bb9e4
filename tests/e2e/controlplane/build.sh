#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go modules pinned in this directory.
#
# The binaries go to a cache directory outside the repository, keyed by a hash
# of the sources here, so a second run with unchanged sources does nothing.
# Progress goes to stderr; the last line on stdout is the bin directory.
#
# Environment:
#   KOPF_CONTROLPLANE_CACHE  cache root (default: $XDG_CACHE_HOME/kopf-controlplane
#                            or ~/.cache/kopf-controlplane)
set -euo pipefail

# Keep stdout for the result only; everything else is progress on stderr.
exec 3>&1 1>&2

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v go >/dev/null 2>&1; then
    echo "build.sh: the Go toolchain ('go') is not on PATH; install Go >= 1.24 to build the control plane." >&2
    exit 127
fi

cache_root="${KOPF_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kopf-controlplane}"
goos="$(go env GOOS)"
goarch="$(go env GOARCH)"

# Everything that influences the binaries: module pins, our Go sources, this script.
hash="$(
    cd "$here"
    {
        echo "$goos/$goarch"
        find . -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name 'build.sh' | LC_ALL=C sort | while read -r f; do
            echo "== $f"
            cat "$f"
        done
    } | sha256sum | cut -c1-16
)"
bindir="$cache_root/$hash"

if [[ -x "$bindir/kube-apiserver" && -x "$bindir/etcd" ]]; then
    echo "build.sh: binaries are up to date in $bindir"
    echo "$bindir" >&3
    exit 0
fi

mkdir -p "$cache_root"
# Serialise concurrent builds (e.g. parallel test workers); the loser re-checks.
exec 9>"$cache_root/.build.lock"
flock 9
if [[ -x "$bindir/kube-apiserver" && -x "$bindir/etcd" ]]; then
    echo "build.sh: binaries were built by a concurrent run in $bindir"
    echo "$bindir" >&3
    exit 0
fi

cd "$here"
version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"   # e.g. v1.34.4
major="${version#v}"; major="${major%%.*}"
minor="${version#v*.}"; minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version"
    ldflags+=" -X $pkg.gitMajor=$major"
    ldflags+=" -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=$build_date"
done

# Build into a scratch directory and move it into place at the end, so that an
# interrupted build never leaves a half-filled bin directory behind.
tmpdir="$(mktemp -d "$cache_root/.build-$hash.XXXXXX")"
trap 'rm -rf "$tmpdir"' EXIT

export CGO_ENABLED=0
start=$SECONDS
echo "build.sh: building etcd ($(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)) ..."
go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$tmpdir/etcd" ./cmd/etcd
echo "build.sh: building kube-apiserver $version (this takes a while) ..."
go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$tmpdir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "build.sh: built in $((SECONDS - start))s"

rm -rf "$bindir"
mv "$tmpdir" "$bindir"
trap - EXIT
chmod 755 "$bindir"
echo "$bindir" >&3
