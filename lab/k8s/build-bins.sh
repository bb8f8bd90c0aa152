#!/usr/bin/env bash
# Builds the cluster's binaries from the Go module proxy: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl (Kubernetes
# K8S_VERSION) and etcd, with the wrapper module lab/k8s/kubebin (its go.mod
# pins the versions). Cached outside the repository, keyed by version and by
# the wrapper's go.mod/go.sum: $(go env GOPATH)/bin/tt-k8s-<version>/.
# Cold: minutes (kube-apiserver alone 2.5-4 on 2 cores); warm: a second.
# Prints the cache directory on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mod="$here/kubebin"
version=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$mod/go.mod")
[ -n "$version" ] || { echo "build-bins: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }
out="${TT_K8S_BIN:-$(go env GOPATH)/bin/tt-k8s-$version}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitCommit=0000000000000000000000000000000000000000 -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/component-base/version.gitMajor=$(echo "${version#v}" | cut -d. -f1) -X k8s.io/component-base/version.gitMinor=$(echo "$version" | cut -d. -f2)"
# The cache key: what the binaries are built from, and how.
key=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "$ldflags"; go env GOVERSION) | sha256sum | cut -c1-16)
tools=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
if [ "$(cat "$out/.key" 2>/dev/null)" = "$key" ]; then
	echo "$out"
	exit 0
fi
mkdir -p "$out"
rm -f "$out/.key"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
cd "$mod"
for t in "${tools[@]}"; do
	start=$SECONDS
	go build -trimpath -ldflags "$ldflags" -o "$out/$t.tmp" "k8s.io/kubernetes/cmd/$t"
	mv "$out/$t.tmp" "$out/$t"
	echo "build-bins: $t in $((SECONDS - start)) s" >&2
done
start=$SECONDS
go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$out/etcd.tmp" "$out/etcd"
echo "build-bins: etcd in $((SECONDS - start)) s" >&2
echo "$key" >"$out/.key"
echo "$out"
