#!/usr/bin/env bash
# Regenerate the committed CO-RE headers. Not used by normal builds.
#
#   bpf/include/gen-vmlinux.sh [amd64|arm64|all]     (default: all)
#
# amd64: dumped from the running kernel's BTF (/sys/kernel/btf/vmlinux), only on
#        an x86_64 host; skipped otherwise.
# arm64: BTF carved out of Debian's arm64 kernel package (raw Image, no ELF) by
#        internal/btfcarve, then dumped. Needs root (dpkg --add-architecture
#        arm64 once), apt, go and bpftool. Downloads go to a temp dir in /tmp.
#
# ARM64_KERNEL_PKG overrides the package (default linux-image-6.1.0-57-arm64);
# append =VERSION to pin a version, e.g. linux-image-6.1.0-57-arm64=6.1.192-3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
what=${1:-all}
pkg=${ARM64_KERNEL_PKG:-linux-image-6.1.0-57-arm64}

gen_amd64() {
	if [[ $(uname -m) != x86_64 || ! -r /sys/kernel/btf/vmlinux ]]; then
		echo "amd64: skipped (needs an x86_64 host with /sys/kernel/btf/vmlinux)" >&2
		[[ $what == all ]] && return 0 || return 1
	fi
	bpftool btf dump file /sys/kernel/btf/vmlinux format c >"$here/amd64/vmlinux.h.tmp"
	mv "$here/amd64/vmlinux.h.tmp" "$here/amd64/vmlinux.h"
	echo "amd64: from running kernel $(uname -r)" >&2
}

gen_arm64() {
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		echo "arm64: adding dpkg architecture arm64 and running apt-get update" >&2
		dpkg --add-architecture arm64
		apt-get update -qq
	fi
	local tmp
	tmp=$(mktemp -d /tmp/gen-vmlinux.XXXXXX)
	trap 'rm -rf "$tmp"' RETURN
	local name=${pkg%%=*} ver=
	[[ $pkg == *=* ]] && ver="=${pkg#*=}"
	(cd "$tmp" && apt-get download -q "$name:arm64$ver")
	dpkg-deb -x "$tmp"/*.deb "$tmp/root"
	local img=("$tmp"/root/boot/vmlinuz-*)
	(cd "$here/../.." && go run ./bpf/include/internal/btfcarve/main.go "${img[0]}" "$tmp/vmlinux.btf")
	bpftool btf dump file "$tmp/vmlinux.btf" format c >"$tmp/vmlinux.h"
	grep -q '^struct user_pt_regs {' "$tmp/vmlinux.h" || {
		echo "arm64: no struct user_pt_regs in the dump, not an arm64 BTF?" >&2
		return 1
	}
	mv "$tmp/vmlinux.h" "$here/arm64/vmlinux.h"
	echo "arm64: from $(dpkg-deb -f "$tmp"/*.deb Package) $(dpkg-deb -f "$tmp"/*.deb Version)" >&2
}

case $what in
amd64) gen_amd64 ;;
arm64) gen_arm64 ;;
all) gen_amd64; gen_arm64 ;;
*) echo "usage: $0 [amd64|arm64|all]" >&2; exit 2 ;;
esac
