// Package tcp collects what the kernel's TCP stack did to the traced
// processes' connections (RTOs, retransmits, SYN retries, resets, zero
// windows, socket errors, and on request connects, closes and activity)
// from tracepoints: a tp_btf program per hook, a raw_tp twin where tp_btf
// is refused. Events come out as event.TCP.
package tcp

// The BPF objects are generated with a pinned clang and committed, so `go build`
// needs no C toolchain. `make generate-check` verifies they are fresh.
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_tcp_event -type tt_tcp_kind -type tt_stat -type tt_go_pid tcp ../../bpf/tcp.bpf.c -- -I../../bpf/include
