/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The maps the Go uprobe objects share: godeadline.bpf.c (expiries and
 * creations), gocalls.bpf.c (outbound calls and their connections) and
 * gotraceparent.bpf.c (where a request's trace context comes from). Each
 * object declares them from this header; userspace creates them once, with
 * the godeadline object, and loads the others against them
 * (MapReplacements), so one map serves every program.
 */
#ifndef TT_GO_MAPS_H
#define TT_GO_MAPS_H

#include "go_event.h"

/* Traced processes and the offsets of their binary. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct tt_go_offsets);
} go_procs SEC(".maps");

struct pid_ptr {
	__u32 pid;
	__u32 _pad;
	__u64 ptr;
};

#define TT_GO_STACK 6

struct creation {
	__u64 ts_ns;
	__u64 pcs[TT_GO_STACK]; /* return addresses, innermost first */
	__u64 goid;
	__u64 g;             /* its runtime.g (read at the expiry if its goid is still goid) */
	__u64 deadline_wall; /* lets userspace sweep entries whose deadline was met */
	__s64 deadline_ext;
	__u8 traceparent[TT_TRACEPARENT_LEN]; /* of the request the goroutine was serving */
	__u8 tp_src;                          /* enum tt_go_tp_source */
};

struct traceparent {
	__u8 s[TT_TRACEPARENT_LEN];
	__u8 src; /* enum tt_go_tp_source */
	__u8 _pad[7];
	/* TT_TP_GOROUTINE: the g whose own entry this one was inherited
	 * from, down any number of `go` statements (see inherited_current). */
	__u64 root;
	/* TT_TP_HTTP: the connection's context (a *cancelCtx) its request was
	 * read under, as net/http's (*conn).readRequest got it; 0 when unknown. */
	__u64 conn_ctx;
};

/*
 * The connection context each net/http serving goroutine reads its next
 * request under: {pid, g} -> the context's data word, set at
 * (*conn).readRequest, copied into the request's http_tp entry.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, __u64);
} http_conn_ctx SEC(".maps");


/*
 * The traceparent header of the request each net/http serving goroutine
 * is handling: {pid, g} -> header value. Set while the header is parsed
 * (Go 1.24+ keeps headers in swiss maps: reading them out of the map in BPF
 * is impractical), cleared when the goroutine starts reading its next
 * request, so a keep-alive connection never lends one request's trace to
 * the next.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct traceparent);
} http_tp SEC(".maps");

/*
 * Live deadlines seen by the detail tier: {pid, *timerCtx} -> creation.
 * Deadlines met in time are never seen again here (no probe runs on cancel):
 * userspace sweeps entries whose deadline is long past and counts them.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pid_ptr);
	__type(value, struct creation);
} deadlines SEC(".maps");

struct span_ids {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 flags;
	__u8 _pad[7];
	__u64 start_wall; /* the span's start time, when its type records one */
	__s64 start_ext;
};
/* Context implementations by {pid, itab address}: how to reach the parent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct pid_ptr);
	__type(value, struct tt_go_ctx_itab);
} go_ctx_itabs SEC(".maps");

/* Span implementations by {pid, type descriptor address}: where the SpanContext is. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct pid_ptr);
	__type(value, struct tt_go_span_type);
} go_span_types SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_GO_HIT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} go_hits SEC(".maps");

/* gRPC layout of each traced process that links google.golang.org/grpc. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct tt_go_grpc_offsets);
} go_grpc SEC(".maps");

/* A gRPC server stream: its transport (*http2Server) and stream ID. */
struct grpc_stream {
	__u32 pid;
	__u32 id;
	__u64 transport;
};

/*
 * The inbound traceparent metadata of gRPC server streams, read as the
 * transport's reader goroutine decodes the HEADERS frame (operateHeaders:
 * the hpack-decoded fields, never the metadata map). The handler runs on
 * another goroutine: a deadline set under the stream's context finds its
 * stream through grpc.streamKey in the context chain. LRU: streams end
 * without a probe.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct grpc_stream);
	__type(value, struct traceparent);
} grpc_tp SEC(".maps");

/*
 * The inbound traceparent of each live HTTP/2 server stream (net/http's):
 * {pid, the stream's context (its *cancelCtx, which the request's context
 * is)} -> traceparent. Set when the stream's HEADERS are turned into a
 * request, deleted when the stream closes, so an entry's context is alive
 * and its address names no other context.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct traceparent);
} h2_stream_tp SEC(".maps");

/* Connection layout of each traced process (see struct tt_go_conn_layout):
 * the outbound calls' probes and the expiry probe's waiting frames. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct tt_go_conn_layout);
} go_conns SEC(".maps");

const struct tt_go_conn_layout *unused_go_conn_layout __attribute__((unused));

#endif /* TT_GO_MAPS_H */
