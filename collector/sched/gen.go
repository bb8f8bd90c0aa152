// Package sched collects two local causes of timeouts for traced
// processes: run-queue delay, from the scheduler tracepoints, and Go
// stop-the-world pauses, from uprobes on the runtime. Both come out as
// event.Local intervals.
package sched

// The BPF objects are generated with a pinned clang and committed, so `go build`
// needs no C toolchain. `make generate-check` verifies they are fresh.
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_rq_sum -type tt_gc_pause -type tt_sched_stat sched ../../bpf/sched.bpf.c -- -I../../bpf/include
