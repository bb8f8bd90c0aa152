// Package enrich is the optional enrichment: kernel functions hooked with
// fentry (or kprobes) where the kernel allows it. Today it reports every
// tail loss probe the kernel sends (tcp_send_loss_probe). The tracer works
// without it: where neither attaches, Start says why.
package enrich

// The BPF objects are generated with a pinned clang and committed, so `go build`
// needs no C toolchain. `make generate-check` verifies they are fresh.
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_enrich_stat enrich ../../bpf/enrich.bpf.c -- -I../../bpf/include
