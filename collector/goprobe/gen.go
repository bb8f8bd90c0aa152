// Package goprobe traces Go programs with uprobes: the context deadline
// expiries (cold tier, always attached), and on demand the detail tier
// (where and by whom each deadline was set, the request's trace context,
// net/http and gRPC calls bound to their connections, dials, goroutine
// ancestry). A Node holds one set of programs and maps for any number of
// processes; Start traces one process on a private node.
package goprobe

// The BPF objects are generated with a pinned clang and committed, so `go build`
// needs no C toolchain. `make generate-check` verifies they are fresh.
//
// Three objects, one per family of probes, sharing the maps of
// bpf/include/go_maps.h: godeadline (expiries, creations, child spans; it
// creates the shared maps), gocalls (outbound calls, their connections,
// dials) and gotraceparent (inbound trace context, goroutine ancestry).
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_go_event -type tt_go_offsets -type tt_go_expiry -type tt_go_hit -type tt_go_trace_status -type tt_go_ctx_itab -type tt_go_span_type -type tt_go_grpc_offsets -type tt_go_tp_source -type tt_go_no_offset -type tt_go_af_found -type tt_go_inbound_kind -type tt_go_budget_src -type tt_go_children_map -type creation -type pid_ptr godeadline ../../bpf/godeadline.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type tt_go_binding -type tt_go_binding_kind -type tt_go_dial_offsets -type tt_go_conn_layout gocalls ../../bpf/gocalls.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -tags linux -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 gotraceparent ../../bpf/gotraceparent.bpf.c -- -I../../bpf/include
