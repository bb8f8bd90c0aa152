// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Where the trace context of a request comes from, when its deadline's
 * context holds no OpenTelemetry span: the traceparent header a net/http
 * server parsed, the traceparent metadata of a gRPC server stream, or the
 * goroutine that started this one. Detail tier; kept per goroutine in
 * http_tp (and per gRPC stream in grpc_tp), read when a deadline is
 * created (godeadline.bpf.c).
 *
 * Never uretprobes: Go moves goroutine stacks.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "goabi.h"
#include "go_event.h"
#include "go_maps.h"
#include "go_ctx.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* net/http.readRequest: a serving goroutine starts on its next request.
 * Where (*conn).readRequest cannot be probed: no connection context. */
SEC("uprobe")
int go_http_request(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_HTTP_REQUEST);
	struct pid_ptr key = {.pid = bpf_get_current_pid_tgid() >> 32, .ptr = GO_G(ctx)};
	bpf_map_delete_elem(&http_tp, &key);
	return 0;
}

/* net/http.(*conn).readRequest(c, ctx): the same, and the connection's
 * context the request will descend from (its data word). */
SEC("uprobe")
int go_http_conn_request(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_HTTP_REQUEST);
	struct pid_ptr key = {.pid = bpf_get_current_pid_tgid() >> 32, .ptr = GO_G(ctx)};
	bpf_map_delete_elem(&http_tp, &key);
	__u64 cc = GO_ARG3(ctx);
	bpf_map_update_elem(&http_conn_ctx, &key, &cc, BPF_ANY);
	return 0;
}

/*
 * net/textproto.canonicalMIMEHeaderKey(k []byte), called for each header
 * line: k is a slice of the raw line "Key: value", so the value follows the
 * key in memory.
 */
SEC("uprobe")
int go_http_header(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_HTTP_HEADER);
	if (GO_ARG2(ctx) != 11)
		return 0;
	__u8 k[16] = {};
	__u64 p = GO_ARG1(ctx);
	if (bpf_probe_read_user(k, 11, (const void *)p))
		return 0;
	const char want[] = "traceparent";
#pragma unroll
	for (int i = 0; i < 11; i++) {
		if ((k[i] | 0x20) != want[i])
			return 0;
	}
	__u8 rest[16] = {};
	if (bpf_probe_read_user(rest, sizeof(rest), (const void *)(p + 11)) || rest[0] != ':')
		return 0;
	int skip = 1;
#pragma unroll
	for (int i = 1; i < 8; i++) {
		if (rest[i] != ' ' && rest[i] != '\t')
			break;
		skip = i + 1;
	}
	struct traceparent tp = {.src = TT_TP_HTTP};
	if (bpf_probe_read_user(tp.s, TT_TRACEPARENT_LEN - 1, (const void *)(p + 11 + skip)))
		return 0;
	struct pid_ptr key = {.pid = bpf_get_current_pid_tgid() >> 32, .ptr = GO_G(ctx)};
	const __u64 *cc = bpf_map_lookup_elem(&http_conn_ctx, &key);
	if (cc)
		tp.conn_ctx = *cc;
	bpf_map_update_elem(&http_tp, &key, &tp, BPF_ANY);
	return 0;
}


/*
 * find_traceparent copies the traceparent field of n decoded hpack fields
 * at fields (each size bytes, its name and value strings at name_off and
 * value_off) into tp->s. 1: found.
 */
static __always_inline int find_traceparent(__u64 fields, __u64 n, __u32 name_off, __u32 value_off, __u32 size,
					    struct traceparent *tp)
{
	/* "tracepar" "ent", little-endian (amd64 and arm64) */
	const __u64 head = 0x7261706563617274ULL;
	for (int i = 0; i < 32; i++) {
		if (i >= n)
			break;
		__u64 f = fields + (__u64)i * size;
		if (read_u64(f + name_off + 8) != 11)
			continue;
		__u8 name[11] = {};
		if (bpf_probe_read_user(name, sizeof(name), (const void *)read_u64(f + name_off)))
			continue;
		if (*(__u64 *)name != head || name[8] != 'e' || name[9] != 'n' || name[10] != 't')
			continue;
		if (read_u64(f + value_off + 8) < TT_TRACEPARENT_LEN - 1)
			return 0;
		return bpf_probe_read_user(tp->s, TT_TRACEPARENT_LEN - 1, (const void *)read_u64(f + value_off)) == 0;
	}
	return 0;
}

/*
 * An HTTP/2 server's newWriterAndRequest(sc, st, f *MetaHeadersFrame), on
 * the connection's serve goroutine, once per inbound stream; impl indexes
 * the layouts (tt_go_offsets.h2_*). The handler runs on a goroutine of its
 * own, maybe started later (a connection's handlers beyond its stream
 * limit wait), so the traceparent is kept by the stream's context, which
 * the request's context is: a deadline whose chain holds it is this
 * request's (go_create_entry).
 */
static __always_inline int h2_server_headers(struct pt_regs *ctx, int impl)
{
	hit(TT_GO_HIT_HTTP_HEADER);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off || !off->h2_stream_ctx[impl])
		return 0;
	__u64 frame = GO_ARG3(ctx);
	struct pid_ptr key = {.pid = tgid, .ptr = read_u64(GO_ARG2(ctx) + off->h2_stream_ctx[impl] + 8)};
	if (!key.ptr)
		return 0;
	struct traceparent tp = {.src = TT_TP_HTTP2};
	__u32 fo = off->h2_meta_fields[impl];
	if (find_traceparent(read_u64(frame + fo), read_u64(frame + fo + 8), off->h2_hf_name[impl], off->h2_hf_value[impl],
			     off->h2_hf_size[impl], &tp))
		bpf_map_update_elem(&h2_stream_tp, &key, &tp, BPF_ANY);
	else
		bpf_map_delete_elem(&h2_stream_tp, &key);
	return 0;
}

/* Its closeStream(sc, st, err): the stream's entry goes before its context
 * can be freed and its address given to another. */
static __always_inline int h2_server_close(struct pt_regs *ctx, int impl)
{
	hit(TT_GO_HIT_HTTP_REQUEST);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off || !off->h2_stream_ctx[impl])
		return 0;
	struct pid_ptr key = {.pid = tgid, .ptr = read_u64(GO_ARG2(ctx) + off->h2_stream_ctx[impl] + 8)};
	bpf_map_delete_elem(&h2_stream_tp, &key);
	return 0;
}

/* The standard library's HTTP/2 server. */
SEC("uprobe")
int go_h2_server_headers(struct pt_regs *ctx)
{
	return h2_server_headers(ctx, 0);
}

SEC("uprobe")
int go_h2_server_close(struct pt_regs *ctx)
{
	return h2_server_close(ctx, 0);
}

/* golang.org/x/net/http2's. */
SEC("uprobe")
int go_xh2_server_headers(struct pt_regs *ctx)
{
	return h2_server_headers(ctx, 1);
}

SEC("uprobe")
int go_xh2_server_close(struct pt_regs *ctx)
{
	return h2_server_close(ctx, 1);
}

/*
 * google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders(t,
 * ctx, frame *http2.MetaHeadersFrame, handle), on the transport's reader
 * goroutine, once per inbound stream: the HEADERS frame's fields as hpack
 * decoded them. The traceparent field is kept for the stream {t, stream ID}
 * (its handler runs on another goroutine) and for this goroutine (the
 * grpc-timeout deadline is set right here).
 */
SEC("uprobe")
int go_grpc_headers(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_GRPC_HEADERS);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_grpc_offsets *go = bpf_map_lookup_elem(&go_grpc, &tgid);
	if (!go || !go->has_server)
		return 0;
	__u64 frame = GO_ARG4(ctx);
	struct pid_ptr gkey = {.pid = tgid, .ptr = GO_G(ctx)};
	struct grpc_stream sk = {.pid = tgid, .transport = GO_ARG1(ctx)};
	bpf_probe_read_user(&sk.id, sizeof(sk.id), (const void *)(read_u64(frame + go->meta_headers) + go->frame_stream_id));
	struct traceparent tp = {.src = TT_TP_GRPC};
	if (find_traceparent(read_u64(frame + go->meta_fields), read_u64(frame + go->meta_fields + 8), go->hf_name,
			     go->hf_value, go->hf_size, &tp)) {
		bpf_map_update_elem(&grpc_tp, &sk, &tp, BPF_ANY);
		bpf_map_update_elem(&http_tp, &gkey, &tp, BPF_ANY);
		return 0;
	}
	/* No traceparent: this goroutine's previous stream must not lend its
	 * own, nor a stream of an earlier transport once at this address with
	 * the same ID (IDs restart at 1 on each connection). */
	bpf_map_delete_elem(&http_tp, &gkey);
	bpf_map_delete_elem(&grpc_tp, &sk);
	return 0;
}


/* runtime.newproc1 in flight, by thread (it runs on the system stack): the creating g. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* pid_tgid */
	__type(value, __u64);
} newproc_parent SEC(".maps");

/*
 * runtime.newproc1(fn, callergp, callerpc, ...), past its stack check: a
 * `go` statement of goroutine callergp. The last-resort trace source: a
 * goroutine started by one that serves a request inherits its traceparent.
 */
SEC("uprobe")
int go_newproc_entry(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_NEWPROC);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!bpf_map_lookup_elem(&go_procs, &tgid))
		return 0;
	__u64 parent = GO_ARG2(ctx);
	bpf_map_update_elem(&newproc_parent, &pid_tgid, &parent, BPF_ANY);
	return 0;
}

/* Each RET of runtime.newproc1: the new g is the result. */
SEC("uprobe")
int go_newproc_ret(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_NEWPROC);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 *parent = bpf_map_lookup_elem(&newproc_parent, &pid_tgid);
	if (!parent)
		return 0;
	struct pid_ptr pkey = {.pid = pid_tgid >> 32, .ptr = *parent};
	struct pid_ptr ckey = {.pid = pid_tgid >> 32, .ptr = GO_ARG1(ctx)};
	bpf_map_delete_elem(&newproc_parent, &pid_tgid);
	const struct traceparent *tp = bpf_map_lookup_elem(&http_tp, &pkey);
	if (!tp) {
		/* g structs are reused: a new goroutine never keeps a dead one's trace. */
		bpf_map_delete_elem(&http_tp, &ckey);
		return 0;
	}
	struct traceparent inherited = *tp;
	inherited.root = tp->src == TT_TP_GOROUTINE ? tp->root : *parent;
	inherited.src = TT_TP_GOROUTINE;
	bpf_map_update_elem(&http_tp, &ckey, &inherited, BPF_ANY);
	return 0;
}
