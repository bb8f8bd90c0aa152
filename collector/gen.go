package collector

// The BPF objects are generated with a pinned clang and committed, so `go build`
// needs no C toolchain. `make generate-check` verifies they are fresh.
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_tcp_event -type tt_tcp_kind -type tt_stat -type tt_go_pid tcp ../bpf/tcp.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_go_event -type tt_go_offsets -type tt_go_expiry -type tt_go_hit -type tt_go_trace_status -type tt_go_ctx_itab -type tt_go_span_type -type tt_go_binding -type tt_go_binding_kind -type tt_go_grpc_offsets -type tt_go_dial_offsets -type tt_go_tp_source -type creation -type pid_ptr godeadline ../bpf/godeadline.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_proc_event -type tt_proc_kind proc ../bpf/proc.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_rq_sum -type tt_gc_pause -type tt_sched_stat sched ../bpf/sched.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_enrich_stat enrich ../bpf/enrich.bpf.c -- -I../bpf/include
