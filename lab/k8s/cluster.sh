#!/usr/bin/env bash
# A one-node Kubernetes cluster in full isolation, for make e2e-k8s.
#
#   cluster.sh up DIR      start it; DIR holds its certificates, tokens,
#                          configuration and logs (DIR/logs)
#   cluster.sh down DIR    stop everything, remove its cgroups, check that
#                          nothing is left (exit 1 if something is)
#   cluster.sh exec DIR CMD...   run CMD inside the cluster's network and
#                          mount namespaces (kubectl is on PATH, KUBECONFIG set)
#
# Every daemon runs in a network namespace of its own (no link to the host)
# and a private mount namespace with tmpfs over /run, /var/lib and /var/log;
# pod cgroups live under a root of their own in each hierarchy. Both
# namespaces are anonymous (unshare): they end with their last process, so
# nothing is left on the host by name. docs/kubernetes.md ("End-to-end test
# in a real cluster") and ../shared K8S.md explain each setting.
#
# Environment: TT_K8S_BIN (the binaries, from build-bins.sh; required for
# up, remembered in DIR for exec and down), TT_JAEGER (a jaeger binary:
# started on the node address if set).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
node=tt-node
node_ip=10.240.0.1     # on a veth whose two ends stay in the namespace
pod_cidr=10.244.0.0/24
svc_cidr=10.96.0.0/24
svc_ip=10.96.0.1       # the "kubernetes" Service, KUBERNETES_SERVICE_HOST
version=v1.34.4

log() { printf '%s cluster: %s\n' "$(date -u +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- up

gen_pki() {
	local d=$1/pki
	mkdir -p "$d"
	(
		cd "$d"
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tt-e2e-ca" \
			-keyout ca.key -out ca.crt 2>/dev/null
		cat >apiserver.ext <<-EOF
			subjectAltName=IP:$node_ip,IP:$svc_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost
			extendedKeyUsage=serverAuth
		EOF
		sign() { # name subject extfile
			openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
				-extfile "$3" -out "$1.crt" 2>/dev/null
		}
		sign apiserver "/CN=kube-apiserver" apiserver.ext
		printf 'subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth\n' "$node_ip" "$node" >kubelet.ext
		sign kubelet "/CN=$node" kubelet.ext
		printf 'extendedKeyUsage=clientAuth\n' >client.ext
		# The API server's client certificate towards the kubelet (logs, exec).
		sign apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client" client.ext
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	)
}

# kubeconfig FILE USER TOKEN
kubeconfig() {
	cat >"$1" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: tt
		  cluster:
		    server: https://$node_ip:6443
		    certificate-authority: $2/pki/ca.crt
		users:
		- name: $3
		  user:
		    token: $4
		contexts:
		- name: tt
		  context: {cluster: tt, user: $3}
		current-context: tt
	EOF
}

write_config() {
	local d=$1 id=$2
	mkdir -p "$d/logs" "$d/cni" "$d/bin"
	gen_pki "$d"
	local t_admin t_node t_cm t_sched
	t_admin=$(openssl rand -hex 16) t_node=$(openssl rand -hex 16)
	t_cm=$(openssl rand -hex 16) t_sched=$(openssl rand -hex 16)
	cat >"$d/tokens.csv" <<-EOF
		$t_admin,admin,uid-admin,"system:masters"
		$t_node,system:node:$node,uid-node,"system:nodes"
		$t_cm,system:kube-controller-manager,uid-cm
		$t_sched,system:kube-scheduler,uid-sched
	EOF
	chmod 600 "$d/tokens.csv"
	kubeconfig "$d/admin.kubeconfig" "$d" admin "$t_admin"
	kubeconfig "$d/kubelet.kubeconfig" "$d" "system:node:$node" "$t_node"
	kubeconfig "$d/cm.kubeconfig" "$d" system:kube-controller-manager "$t_cm"
	kubeconfig "$d/sched.kubeconfig" "$d" system:kube-scheduler "$t_sched"

	# Pods resolve nothing: no cluster DNS, no way out.
	printf 'nameserver 127.0.0.1\noptions ndots:1\n' >"$d/resolv.conf"
	# The values the kubelet checks (protectKernelDefaults) but must not set
	# on the host: bind-mounted over /proc/sys in the private mount namespace.
	mkdir -p "$d/sysctl"
	echo 1 >"$d/sysctl/overcommit_memory"
	echo 10 >"$d/sysctl/panic"
	echo 1 >"$d/sysctl/panic_on_oops"

	cat >"$d/cni/10-tt.conflist" <<-EOF
		{
		  "cniVersion": "0.4.0",
		  "name": "tt",
		  "plugins": [{
		    "type": "bridge", "bridge": "tt-cni0", "isGateway": true, "ipMasq": false,
		    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]],
		             "routes": [{"dst": "0.0.0.0/0"}]}
		  }]
		}
	EOF

	# containerd 1.6 (Debian). restrict_oom_score_adj: root here lacks
	# CAP_SYS_RESOURCE, runc's write of oom_score_adj would fail every
	# sandbox. runcwrap drops capabilities the node cannot grant (logged).
	cat >"$d/containerd.toml" <<-EOF
		version = 2
		root = "/var/lib/containerd"
		state = "/run/containerd"
		disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
		[grpc]
		  address = "/run/containerd/containerd.sock"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "tt-e2e.local/pause:e2e"
		  restrict_oom_score_adj = true
		  enable_selinux = false
		  max_container_log_line_size = 1048576
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		        BinaryName = "$d/bin/runcwrap"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$d/cni"
	EOF

	cat >"$d/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: $node_ip
		healthzBindAddress: 127.0.0.1
		readOnlyPort: 0
		cgroupDriver: cgroupfs
		cgroupRoot: /$id
		cgroupsPerQOS: true
		failSwapOn: false
		protectKernelDefaults: true
		containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
		resolvConf: $d/resolv.conf
		tlsCertFile: $d/pki/kubelet.crt
		tlsPrivateKeyFile: $d/pki/kubelet.key
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: false}
		  x509: {clientCAFile: $d/pki/ca.crt}
		authorization: {mode: AlwaysAllow}
		containerLogMaxSize: 200Mi
		containerLogMaxFiles: 2
		imageGCHighThresholdPercent: 100
		evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
		podPidsLimit: -1
		maxPods: 30
		serializeImagePulls: false
		shutdownGracePeriod: 0s
	EOF
	echo "$id" >"$d/id"
}

# The inside of the namespaces: mounts, network, daemons. Runs as the
# namespaces' anchor process and waits for SIGTERM (cluster.sh down).
inside() {
	local d=$1 id
	id=$(cat "$d/id")
	bin=$TT_K8S_BIN
	echo $$ >"$d/anchor.pid"
	readlink /proc/self/ns/net >"$d/ns.net"
	readlink /proc/self/ns/mnt >"$d/ns.mnt"
	# A failure keeps this anchor (and so the namespaces) alive: cluster.sh
	# down stops what did start. up sees DIR/failed.
	hold() {
		echo "$*" >"$d/failed"
		log "inside: $*"
		wait_term
	}
	die() { hold "$*"; }
	set +e -E
	trap 'hold "failed at line $LINENO: $BASH_COMMAND"' ERR
	# Private mounts: the kubelet's and containerd's state, CNI's netns
	# files, pod logs never touch the host's.
	for m in /run /var/lib /var/log; do
		mount -t tmpfs -o mode=755 "tt-$id" "$m"
	done
	mount --bind "$d/resolv.conf" /etc/resolv.conf
	mount --bind "$d/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
	mount --bind "$d/sysctl/panic" /proc/sys/kernel/panic
	mount --bind "$d/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops

	# The node's network: lo, a veth pair (no dummy netdev here) holding the
	# node address, a default route into it (stays in the namespace), and
	# the Service address of the API server (no kube-proxy).
	ip link set lo up
	ip link add tt-node0 type veth peer name tt-node1
	ip addr add "$node_ip/24" dev tt-node0
	ip link set tt-node0 up
	ip link set tt-node1 up
	ip route add default dev tt-node0
	for chain in OUTPUT PREROUTING; do
		iptables -t nat -A "$chain" -d "$svc_ip" -p tcp --dport 443 -j DNAT --to-destination "$node_ip:6443"
	done

	local pids=()
	start() { # name cmd...
		local name=$1
		shift
		"$@" >>"$d/logs/$name.log" 2>&1 &
		echo "$name $!" >>"$d/pids"
		pids+=($!)
	}
	wait_for() { # what command...
		local what=$1 i
		shift
		for ((i = 0; i < 600; i++)); do
			"$@" >/dev/null 2>&1 && return 0
			sleep 0.2
		done
		die "$what did not come up in 120 s (see $d/logs)"
	}

	start etcd "$bin/etcd" --data-dir /var/lib/etcd --unsafe-no-fsync \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster default=http://127.0.0.1:2380 --listen-metrics-urls ""
	start containerd /usr/bin/containerd --config "$d/containerd.toml"
	wait_for etcd bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379'
	start kube-apiserver "$bin/kube-apiserver" \
		--etcd-servers http://127.0.0.1:2379 \
		--bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
		--tls-cert-file "$d/pki/apiserver.crt" --tls-private-key-file "$d/pki/apiserver.key" \
		--client-ca-file "$d/pki/ca.crt" --token-auth-file "$d/tokens.csv" \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--allow-privileged=true --anonymous-auth=false --profiling=false \
		--service-cluster-ip-range "$svc_cidr" \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$d/pki/sa.pub" --service-account-signing-key-file "$d/pki/sa.key" \
		--kubelet-client-certificate "$d/pki/apiserver-kubelet.crt" --kubelet-client-key "$d/pki/apiserver-kubelet.key" \
		--kubelet-preferred-address-types InternalIP \
		--cert-dir /run/kubernetes
	wait_for kube-apiserver "$bin/kubectl" --kubeconfig "$d/admin.kubeconfig" get --raw /readyz
	start kube-controller-manager "$bin/kube-controller-manager" \
		--kubeconfig "$d/cm.kubeconfig" --authentication-kubeconfig "$d/cm.kubeconfig" \
		--authorization-kubeconfig "$d/cm.kubeconfig" \
		--use-service-account-credentials --service-account-private-key-file "$d/pki/sa.key" \
		--root-ca-file "$d/pki/ca.crt" --leader-elect=false --bind-address 127.0.0.1 \
		--cert-dir /run/kubernetes --profiling=false
	start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$d/sched.kubeconfig" \
		--authentication-kubeconfig "$d/sched.kubeconfig" --authorization-kubeconfig "$d/sched.kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --profiling=false
	wait_for containerd /usr/bin/ctr --address /run/containerd/containerd.sock version
	for img in "$d"/images/*.tar; do
		/usr/bin/ctr --address /run/containerd/containerd.sock -n k8s.io images import "$img" >>"$d/logs/import.log" 2>&1 ||
			die "ctr images import $img failed: $(tail -3 "$d/logs/import.log")"
	done
	# The pods' cgroup root, in every hierarchy (cpuset needs its CPUs and
	# memory nodes copied from the parent: v1 does not inherit them).
	local h
	for h in /sys/fs/cgroup/*/; do
		[ -e "$h/cgroup.procs" ] || continue
		mkdir -p "$h$id"
		if [ -e "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h$id/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h$id/cpuset.mems"
		fi
	done
	start kubelet "$bin/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$d/kubelet.kubeconfig" \
		--hostname-override "$node" --node-ip "$node_ip" --root-dir /var/lib/kubelet --v 1
	if [ -n "${TT_JAEGER:-}" ]; then
		write_jaeger "$d"
		start jaeger "$TT_JAEGER" --config "$d/jaeger.yaml"
		wait_for jaeger bash -c "exec 3<>/dev/tcp/$node_ip/16686"
	fi
	touch "$d/ready"
	log "inside: up (pids: $(awk '{printf "%s=%s ", $1, $2}' "$d/pids"))"
	# Wait for cluster.sh down; the namespaces end with this process.
	wait_term
}

# wait_term waits for SIGTERM, leaving no sleep behind in the namespaces.
wait_term() {
	local sp=""
	trap 'kill $sp 2>/dev/null; exit 0' TERM INT
	while :; do
		sleep 1 &
		sp=$!
		wait $sp || true
	done
}

write_jaeger() {
	cat >"$1/jaeger.yaml" <<-EOF
		service:
		  extensions: [jaeger_storage, jaeger_query]
		  pipelines:
		    traces:
		      receivers: [otlp]
		      processors: []
		      exporters: [jaeger_storage_exporter]
		  telemetry:
		    metrics:
		      level: none
		    logs:
		      level: warn
		extensions:
		  jaeger_storage:
		    backends:
		      mem:
		        memory:
		          max_traces: 10000
		  jaeger_query:
		    storage:
		      traces: mem
		    enable_tracing: false
		    http:
		      endpoint: $node_ip:16686
		    grpc:
		      endpoint: 127.0.0.1:16685
		receivers:
		  otlp:
		    protocols:
		      grpc:
		        endpoint: $node_ip:4317
		      http:
		        endpoint: $node_ip:4318
		exporters:
		  jaeger_storage_exporter:
		    trace_storage: mem
	EOF
}

up() {
	local d=$1
	[ -n "${TT_K8S_BIN:-}" ] || die "TT_K8S_BIN is not set (lab/k8s/build-bins.sh prints it)"
	for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
		[ -x "$TT_K8S_BIN/$b" ] || die "$TT_K8S_BIN/$b missing: run lab/k8s/build-bins.sh"
	done
	for b in /usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback; do
		[ -x "$b" ] || die "$b missing: run .ci/deps (containerd, runc, containernetworking-plugins)"
	done
	[ -x "$d/bin/runcwrap" ] || die "$d/bin/runcwrap missing (go build ./lab/k8s/runcwrap)"
	local id
	id="tt-k8s-$(basename "$d" | tr -cd 'a-zA-Z0-9' | tail -c 12)"
	write_config "$d" "$id"
	echo "$TT_K8S_BIN" >"$d/k8s-bin"
	# Host state before, for the leftover check.
	record_host "$d/host-before"
	log "starting $version in $d (cgroup root /$id)"
	setsid unshare --mount --net --propagation slave --fork -- "$0" _inside "$d" \
		>>"$d/logs/inside.log" 2>&1 </dev/null &
	local i
	for ((i = 0; i < 900; i++)); do
		[ -e "$d/ready" ] && break
		[ -e "$d/failed" ] && die "the cluster did not start: $(cat "$d/failed") (see $d/logs)"
		if ! kill -0 $! 2>/dev/null; then
			cat "$d/logs/inside.log" >&2
			die "the cluster's anchor exited"
		fi
		sleep 0.2
	done
	[ -e "$d/ready" ] || die "not ready in 180 s: $(tail -5 "$d/logs/inside.log")"
	# Node Ready (the CNI configuration is found, the runtime is up).
	for ((i = 0; i < 600; i++)); do
		if run_in "$d" kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True; then
			log "node $node Ready"
			return 0
		fi
		sleep 0.2
	done
	run_in "$d" kubectl describe node "$node" >&2 || true
	die "node $node not Ready in 120 s (see $d/logs)"
}

run_in() {
	local d=$1
	shift
	local anchor bin
	anchor=$(cat "$d/anchor.pid")
	bin=${TT_K8S_BIN:-$(cat "$d/k8s-bin")}
	nsenter -t "$anchor" -m -n -- env PATH="$bin:$PATH" KUBECONFIG="$d/admin.kubeconfig" \
		CONTAINERD_ADDRESS=/run/containerd/containerd.sock CONTAINERD_NAMESPACE=k8s.io "$@"
}

# ---------------------------------------------------------------- down

# What of the cluster could leak onto the host: pod network namespaces
# (CNI names them cni-*) and mounts of the cluster's paths. Other work on
# the machine may add its own namespaces and mounts meanwhile: not compared.
record_host() {
	{
		echo "## netns"
		ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}' | sort || true
		echo "## mounts"
		awk '{print $5, $9}' /proc/self/mountinfo |
			grep -E '/var/lib/(kubelet|containerd|cni|etcd)|/run/(containerd|netns/cni-|kubernetes)|tt-k8s|kubepods|/etc/resolv.conf|/proc/sys/(vm|kernel)/' |
			sort || true
	} >"$1"
}

# Our cgroup directories, deepest first.
our_cgroups() {
	local id=$1
	find /sys/fs/cgroup/*/"$id" /sys/fs/cgroup/"$id" -depth -type d 2>/dev/null || true
}

down() {
	local d=$1 id rc=0
	[ -e "$d/id" ] || { log "nothing to tear down in $d"; return 0; }
	id=$(cat "$d/id")
	local anchor=""
	[ -e "$d/anchor.pid" ] && anchor=$(cat "$d/anchor.pid")
	local netns="" mntns=""
	[ -e "$d/ns.net" ] && netns=$(cat "$d/ns.net") mntns=$(cat "$d/ns.mnt")
	if [ -n "$anchor" ] && kill -0 "$anchor" 2>/dev/null; then
		# Workloads first: the kubelet stops the pods it knows.
		run_in "$d" kubectl delete namespace -l tt-e2e=1 --wait=false >/dev/null 2>&1 || true
	fi
	stop() { # name
		local pid
		pid=$(awk -v n="$1" '$1 == n {print $2}' "$d/pids" 2>/dev/null | tail -1)
		[ -n "$pid" ] || return 0
		kill -TERM "$pid" 2>/dev/null || return 0
		for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
		log "$1 ($pid) ignored SIGTERM for 10 s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	}
	for n in jaeger kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$n"; done
	if [ -n "$anchor" ] && kill -0 "$anchor" 2>/dev/null; then
		# Containers the kubelet left: kill their tasks, then the shims go.
		local t
		for t in $(run_in "$d" ctr -n k8s.io tasks ls -q 2>/dev/null); do
			run_in "$d" ctr -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
		done
		sleep 0.5
		for t in $(run_in "$d" ctr -n k8s.io tasks ls -q 2>/dev/null); do
			run_in "$d" ctr -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	# Whatever is still in our cgroups (shims, containers) is ours.
	local cg p
	for cg in $(our_cgroups "$id"); do
		for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	done
	# The shims are in the namespaces, outside our cgroups.
	if [ -n "$netns" ]; then
		for p in /proc/[0-9]*; do
			[ "${p#/proc/}" = "$anchor" ] && continue
			[ "$(readlink "$p/ns/net" 2>/dev/null)" = "$netns" ] && kill -KILL "${p#/proc/}" 2>/dev/null || true
		done
	fi
	[ -n "$anchor" ] && kill -TERM "$anchor" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		[ -n "$anchor" ] && kill -0 "$anchor" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$anchor" ] && kill -KILL "$anchor" 2>/dev/null || true
	# A last sweep: anything still in the namespaces (a shim restarting).
	if [ -n "$netns" ]; then
		for p in /proc/[0-9]*; do
			if [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$netns" ] || [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$mntns" ]; then
				kill -KILL "${p#/proc/}" 2>/dev/null || true
			fi
		done
		sleep 0.3
	fi
	# Cgroups, depth-first (a cgroup with tasks cannot go: retry a little).
	for ((i = 0; i < 50; i++)); do
		for cg in $(our_cgroups "$id"); do rmdir "$cg" 2>/dev/null || true; done
		[ -z "$(our_cgroups "$id")" ] && break
		sleep 0.2
	done

	# Nothing left?
	local left
	left=$(our_cgroups "$id")
	[ -z "$left" ] || { log "LEFT: cgroups: $left"; rc=1; }
	if [ -n "$netns" ] || [ -n "$mntns" ]; then
		for p in /proc/[0-9]*; do
			local n m
			n=$(readlink "$p/ns/net" 2>/dev/null || true) m=$(readlink "$p/ns/mnt" 2>/dev/null || true)
			if [ "$n" = "$netns" ] || [ "$m" = "$mntns" ]; then
				log "LEFT: process ${p#/proc/} ($(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80)) in the cluster's namespaces"
				rc=1
			fi
		done
	fi
	local pid
	while read -r name pid; do
		if kill -0 "$pid" 2>/dev/null && [ "$(readlink "/proc/$pid/ns/net")" = "$netns" ]; then
			log "LEFT: $name ($pid)"
			rc=1
		fi
	done <"$d/pids" 2>/dev/null || true
	if [ -e "$d/host-before" ]; then
		record_host "$d/host-after"
		if ! diff -u "$d/host-before" "$d/host-after" >&2; then
			log "LEFT: the host's network namespaces or mounts changed (diff above)"
			rc=1
		fi
	fi
	if ((rc == 0)); then
		log "down: nothing left (no process in its namespaces, no cgroup /$id, host netns and mounts as before)"
		rm -f "$d/anchor.pid" "$d/ready" "$d/id" "$d/ns.net" "$d/ns.mnt"
	fi
	return $rc
}

case "${1:-}" in
up) up "$2" ;;
down) down "$2" ;;
exec)
	d=$2
	shift 2
	run_in "$d" "$@"
	;;
_inside) inside "$2" ;;
*)
	echo "usage: $0 up|down|exec DIR [CMD...]" >&2
	exit 2
	;;
esac
