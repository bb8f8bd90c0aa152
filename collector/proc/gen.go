// Package proc follows process execs and exits on the whole node from two
// scheduler tracepoints (sched_process_exec, sched_process_exit): how the
// node agent learns of processes to trace without rescanning /proc.
package proc

// The BPF objects are generated with a pinned clang and committed, so `go build`
// needs no C toolchain. `make generate-check` verifies they are fresh.
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_proc_event -type tt_proc_kind proc ../../bpf/proc.bpf.c -- -I../../bpf/include
