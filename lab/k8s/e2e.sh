#!/usr/bin/env bash
# make e2e-k8s: the node agent in a real one-node Kubernetes cluster,
# offline. Builds Kubernetes and etcd (cached, build-bins.sh), the images
# (make image; the workload and sandbox images with imagetar), brings the
# cluster up in namespaces of its own (cluster.sh), runs TestKubernetesE2E
# against it, and always tears it down (trap), checking nothing is left.
# Root only. docs/kubernetes.md, "End-to-end test in a real cluster".
#
# TT_E2E_K8S_SCOPE=namespace: the agent traces the workload's pods only
# (for machines shared with other work); the default traces the whole node.
# TT_E2E_K8S_KEEP=1 keeps the state directory (logs) after a pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "e2e-k8s: needs root (namespaces, cgroups, BPF)" >&2; exit 1; }
t0=$SECONDS
say() { printf '%s e2e-k8s: %s\n' "$(date -u +%T)" "$*" >&2; }

export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
say "building Kubernetes and etcd (cached)"
TT_K8S_BIN=$(lab/k8s/build-bins.sh | tail -1)
export TT_K8S_BIN
t_bins=$((SECONDS - t0))
jaeger="${TT_JAEGER:-$(go env GOPATH)/bin/jaeger}"
[ -x "$jaeger" ] || { echo "e2e-k8s: no Jaeger at $jaeger: .ci/deps builds it" >&2; exit 1; }
export TT_JAEGER=$jaeger

dir=$(mktemp -d /tmp/tt-k8s.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/bin" "$dir/images"
say "state in $dir"
t1=$SECONDS
say "building the images"
for p in lab/k8s/runcwrap lab/k8s/pause lab/k8s/imagetar lab/testprog/labapp; do
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/bin/$(basename "$p")" "./$p"
done
"$dir/bin/imagetar" -name tt-e2e.local/pause:e2e -o "$dir/images/pause.tar" "$dir/bin/pause" >/dev/null
"$dir/bin/imagetar" -name tt-e2e.local/labapp:e2e -o "$dir/images/labapp.tar" "$dir/bin/labapp" >/dev/null
# The tracer's image, named as deploy/daemonset.yaml runs it.
make image >/dev/null
cp bin/tracer-image.tar "$dir/images/tracer.tar"
t_images=$((SECONDS - t1))

rc=0
teardown() {
	local down=0
	lab/k8s/cluster.sh down "$dir" || down=$?
	if ((rc == 0 && down != 0)); then rc=$down; fi
	if ((rc != 0)); then
		say "FAILED (state and logs kept in $dir); last lines of each log:"
		for f in "$dir"/logs/*.log; do
			echo "--- $f" >&2
			tail -5 "$f" >&2
		done
	elif [ -z "${TT_E2E_K8S_KEEP:-}" ]; then
		rm -rf "$dir"
	fi
	say "build $t_bins s (Kubernetes, etcd), images $t_images s, cluster and test $((SECONDS - t2)) s, total $((SECONDS - t0)) s"
	exit $rc
}
t2=$SECONDS
trap teardown EXIT
trap 'rc=130; exit' INT TERM
lab/k8s/cluster.sh up "$dir" || { rc=$?; exit; }
say "cluster up in $((SECONDS - t2)) s"
TT_LAB=1 TT_E2E_K8S_DIR=$dir go test -count=1 -v -timeout 20m -run '^TestKubernetesE2E$' ./lab/k8s/ || rc=$?
