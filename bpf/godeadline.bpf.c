// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Go context deadline expiries, from uprobes on the traced binary.
 *
 * Cold tier (always attached): the CALLs to (*timerCtx).cancel in the
 * timer callback closure of context.WithDeadlineCause and in its "deadline
 * already passed" branch. Those run only when a deadline expires, so a
 * healthy request never traps. The receiver (the *timerCtx) is the first
 * argument register at the call.
 *
 * Detail tier (attached while a process is timing out): WithDeadlineCause's
 * entry (past the stack-check prologue, so morestack cannot fire it twice)
 * and each of its RETs record when, where and by which goroutine a deadline
 * was set, keyed by {pid, *timerCtx}; the expiry probe consumes the record.
 *
 * Never uretprobes: Go moves goroutine stacks.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "goabi.h"
#include "go_event.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

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
	__u64 deadline_wall; /* lets userspace sweep entries whose deadline was met */
	__s64 deadline_ext;
	__u8 traceparent[TT_TRACEPARENT_LEN]; /* of the request the goroutine was serving */
	__u8 tp_src;                          /* enum tt_go_tp_source */
};

struct traceparent {
	__u8 s[TT_TRACEPARENT_LEN];
	__u8 src; /* enum tt_go_tp_source */
};

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

/* WithDeadlineCause calls in flight: {pid, g} -> creation, from entry to RET. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct creation);
} creating SEC(".maps");

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
};

/*
 * The first span started below each live deadline: {pid, *timerCtx} ->
 * its IDs. For code that opens its span only inside the call made under
 * the deadline (an instrumented transport): the span is a descendant of the
 * deadline's context, not an ancestor. LRU: deadlines that are met are
 * never consumed.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct span_ids);
} child_spans SEC(".maps");

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
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} go_events SEC(".maps");

/* Request -> connection bindings (detail tier). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 512 * 1024);
} go_bindings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_GO_HIT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} go_hits SEC(".maps");

const struct tt_go_event *unused_go_event __attribute__((unused));
const struct tt_go_offsets *unused_go_offsets __attribute__((unused));
const enum tt_go_expiry *unused_go_expiry __attribute__((unused));
const enum tt_go_hit *unused_go_hit __attribute__((unused));
const enum tt_go_trace_status *unused_go_trace_status __attribute__((unused));
const struct tt_go_ctx_itab *unused_go_ctx_itab __attribute__((unused));
const struct tt_go_span_type *unused_go_span_type __attribute__((unused));
const struct tt_go_binding *unused_go_binding __attribute__((unused));
const enum tt_go_binding_kind *unused_go_binding_kind __attribute__((unused));
const struct tt_go_grpc_offsets *unused_go_grpc_offsets __attribute__((unused));
const struct tt_go_dial_offsets *unused_go_dial_offsets __attribute__((unused));
const enum tt_go_tp_source *unused_go_tp_source __attribute__((unused));
const struct creation *unused_creation __attribute__((unused));
const struct pid_ptr *unused_pid_ptr __attribute__((unused));

static __always_inline void hit(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&go_hits, &idx);
	if (v)
		*v += 1;
}

static __always_inline __u64 read_u64(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
	return v;
}

static __always_inline __u64 goid_of(__u64 g, const struct tt_go_offsets *off)
{
	return g ? read_u64(g + off->g_goid) : 0;
}

/*
 * read_span copies the IDs of the span a valueCtx holds under OpenTelemetry's
 * current-span key. 1: read; 0: not a span; -1: a span whose layout is
 * unknown (the caller stops rather than report an ancestor's span).
 */
static __always_inline int read_span(__u64 data, __u32 tgid, const struct tt_go_offsets *off,
				     struct span_ids *ids)
{
	if (off->span_key_type && read_u64(data + off->valuectx_key) != off->span_key_type)
		return 0;
	struct pid_ptr tkey = {.pid = tgid, .ptr = read_u64(data + off->valuectx_val)};
	const struct tt_go_span_type *st = bpf_map_lookup_elem(&go_span_types, &tkey);
	if (!st)
		return 0;
	if (st->sc_off == TT_GO_SPAN_UNKNOWN)
		return -1;
	__u64 sc = read_u64(data + off->valuectx_val + 8) + st->sc_off;
	bpf_probe_read_user(ids->trace_id, sizeof(ids->trace_id), (const void *)(sc + off->sc_trace_id));
	bpf_probe_read_user(ids->span_id, sizeof(ids->span_id), (const void *)(sc + off->sc_span_id));
	bpf_probe_read_user(&ids->flags, 1, (const void *)(sc + off->sc_flags));
	return 1;
}

#define TT_GO_CHAIN 24

/*
 * find_span walks up from the deadline's parent to the nearest context value
 * holding an OpenTelemetry span and copies its trace and span IDs. It runs at
 * expiry, while the deadline's context holds its ancestors alive, so what it
 * reads is the request's own. Only context types userspace identified (by
 * itab) are stepped through; anything else ends the walk without a guess.
 */
static __always_inline void find_span(struct tt_go_event *e, __u64 c, __u32 tgid,
				      const struct tt_go_offsets *off)
{
	if (!off->has_otel)
		return;
	__u64 tab = read_u64(c + off->timerctx_parent);
	__u64 data = read_u64(c + off->timerctx_parent + 8);
	e->trace_status = TT_TRACE_TOO_DEEP;
	for (int i = 0; i < TT_GO_CHAIN; i++) {
		if (!tab || !data) {
			e->trace_status = TT_TRACE_ROOT;
			return;
		}
		struct pid_ptr key = {.pid = tgid, .ptr = tab};
		const struct tt_go_ctx_itab *it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
		if (!it) {
			e->trace_status = TT_TRACE_UNKNOWN_CTX;
			e->stop_itab = tab;
			return;
		}
		if (it->parent_off == TT_GO_ROOT_CTX) {
			e->trace_status = TT_TRACE_ROOT;
			return;
		}
		e->trace_depth = i + 1;
		if (it->is_value) {
			struct span_ids ids = {};
			int r = read_span(data, tgid, off, &ids);
			if (r < 0) {
				e->trace_status = TT_TRACE_UNKNOWN_CTX;
				e->stop_itab = tab;
				return;
			}
			if (r > 0) {
				__builtin_memcpy(e->trace_id, ids.trace_id, sizeof(e->trace_id));
				__builtin_memcpy(e->span_id, ids.span_id, sizeof(e->span_id));
				e->trace_flags = ids.flags;
				e->trace_status = TT_TRACE_FOUND;
				return;
			}
		}
		__u64 next = data + it->parent_off;
		tab = read_u64(next);
		data = read_u64(next + 8);
	}
}

/*
 * At each return of the OpenTelemetry SDK's (*tracer).Start: the returned
 * context is a valueCtx holding the new span. Walk up from it to the
 * nearest deadline and remember the span as that deadline's first child.
 */
SEC("uprobe")
int go_span_start_ret(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_SPAN_START);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off || !off->has_otel)
		return 0;
	__u64 tab = GO_ARG1(ctx), data = GO_ARG2(ctx);
	struct pid_ptr key = {.pid = tgid, .ptr = tab};
	const struct tt_go_ctx_itab *it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
	if (!it || !it->is_value)
		return 0;
	struct span_ids ids = {};
	if (read_span(data, tgid, off, &ids) <= 0)
		return 0;
	__u64 next = data + it->parent_off;
	for (int i = 0; i < TT_GO_CHAIN; i++) {
		tab = read_u64(next);
		data = read_u64(next + 8);
		if (!tab || !data)
			return 0;
		key.ptr = tab;
		it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
		if (!it || it->parent_off == TT_GO_ROOT_CTX)
			return 0;
		if (it->is_timer) {
			struct pid_ptr dkey = {.pid = tgid, .ptr = data};
			bpf_map_update_elem(&child_spans, &dkey, &ids, BPF_NOEXIST);
			return 0;
		}
		next = data + it->parent_off;
	}
	return 0;
}

static __always_inline int on_expiry(struct pt_regs *ctx, __u8 kind)
{
	hit(TT_GO_HIT_EXPIRY);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	__u64 c = GO_ARG1(ctx);
	if (!c)
		return 0;
	/* Already cancelled (a parent got there first, racing the timer): the
	 * cancel is a no-op and the parent's expiry is the one to report. */
	if (kind == TT_GO_TIMER_FIRED && read_u64(c + off->cancelctx_err) != 0)
		return 0;

	struct tt_go_event *e = bpf_ringbuf_reserve(&go_events, sizeof(*e), 0);
	if (!e) {
		hit(TT_GO_HIT_DROPPED);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->ctx = c;
	e->pid = tgid;
	e->tid = (__u32)pid_tgid;
	e->kind = kind;
	e->goid = goid_of(GO_G(ctx), off);
	e->deadline_wall = read_u64(c + off->timerctx_deadline);
	e->deadline_ext = (__s64)read_u64(c + off->timerctx_deadline + 8);
	__u64 children = read_u64(c + off->cancelctx_children);
	if (children)
		e->children = read_u64(children);

	/* A fired timer's creation was recorded at WithDeadlineCause's return;
	 * an already-past deadline expires before that return, while its
	 * creation is still keyed by the goroutine setting it. */
	struct pid_ptr key = {.pid = tgid, .ptr = c};
	struct creation *cr;
	if (kind == TT_GO_EXPIRED_AT_CREATION) {
		struct pid_ptr gkey = {.pid = tgid, .ptr = GO_G(ctx)};
		cr = bpf_map_lookup_elem(&creating, &gkey);
	} else {
		cr = bpf_map_lookup_elem(&deadlines, &key);
	}
	if (cr) {
		e->created_ns = cr->ts_ns;
		__builtin_memcpy(e->created_pcs, cr->pcs, sizeof(e->created_pcs));
		e->created_goid = cr->goid;
		/* Userspace uses it only when no span is found in the chain. */
		__builtin_memcpy(e->traceparent, cr->traceparent, sizeof(e->traceparent));
		e->traceparent_src = cr->tp_src;
		if (kind == TT_GO_TIMER_FIRED)
			bpf_map_delete_elem(&deadlines, &key);
	}
	find_span(e, c, tgid, off);
	struct span_ids *child = bpf_map_lookup_elem(&child_spans, &key);
	if (child) {
		if (e->trace_status != TT_TRACE_FOUND) {
			__builtin_memcpy(e->trace_id, child->trace_id, sizeof(e->trace_id));
			__builtin_memcpy(e->span_id, child->span_id, sizeof(e->span_id));
			e->trace_flags = child->flags;
			e->trace_status = TT_TRACE_CHILD_SPAN;
		}
		bpf_map_delete_elem(&child_spans, &key);
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("uprobe")
int go_timer_fired(struct pt_regs *ctx)
{
	return on_expiry(ctx, TT_GO_TIMER_FIRED);
}

SEC("uprobe")
int go_expired_at_creation(struct pt_regs *ctx)
{
	return on_expiry(ctx, TT_GO_EXPIRED_AT_CREATION);
}

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

const struct grpc_stream *unused_grpc_stream __attribute__((unused));

/*
 * grpc_stream_traceparent walks up from a new deadline's parent context
 * (itab tab, data) to the valueCtx grpc's server put the stream in
 * (grpc.streamKey -> *transport.ServerStream) and copies the traceparent
 * recorded for that stream, if any.
 */
static __always_inline void grpc_stream_traceparent(__u32 tgid, __u64 tab, __u64 data, struct creation *cr)
{
	const struct tt_go_grpc_offsets *go = bpf_map_lookup_elem(&go_grpc, &tgid);
	if (!go || !go->has_server || !go->stream_key_type)
		return;
	for (int i = 0; i < TT_GO_CHAIN; i++) {
		if (!tab || !data)
			return;
		struct pid_ptr key = {.pid = tgid, .ptr = tab};
		const struct tt_go_ctx_itab *it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
		if (!it || it->parent_off == TT_GO_ROOT_CTX)
			return;
		if (it->is_value && read_u64(data + go->valuectx_key) == go->stream_key_type) {
			__u64 stream = read_u64(data + go->valuectx_val + 8);
			struct grpc_stream sk = {.pid = tgid, .transport = read_u64(stream + go->stream_st + 8)};
			__u64 common = go->stream_embed == TT_GO_NO_EMBED ? stream : read_u64(stream + go->stream_embed);
			bpf_probe_read_user(&sk.id, sizeof(sk.id), (const void *)(common + go->stream_id));
			const struct traceparent *tp = bpf_map_lookup_elem(&grpc_tp, &sk);
			if (tp) {
				__builtin_memcpy(cr->traceparent, tp->s, sizeof(cr->traceparent));
				cr->tp_src = TT_TP_GRPC;
			}
			return;
		}
		__u64 next = data + it->parent_off;
		tab = read_u64(next);
		data = read_u64(next + 8);
	}
}

SEC("uprobe")
int go_create_entry(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_CREATE_ENTRY);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	__u64 g = GO_G(ctx);
	struct pid_ptr key = {.pid = tgid, .ptr = g};
	struct creation cr = {.ts_ns = bpf_ktime_get_ns(), .goid = goid_of(g, off)};
	/* The code that set the deadline is usually a few frames up
	 * (WithTimeout, WithDeadline, net/http's client): walk Go's frame
	 * pointers. Here, before the function pushes its own frame, the frame
	 * pointer register is the caller's; each frame keeps the saved frame
	 * pointer at fp and the return address at fp+8. */
#if GO_HAS_LR
	cr.pcs[0] = GO_LR(ctx);
#else
	cr.pcs[0] = read_u64(GO_SP(ctx));
#endif
	__u64 fp = GO_FP(ctx);
#pragma unroll
	for (int i = 1; i < TT_GO_STACK; i++) {
		if (!fp)
			break;
		cr.pcs[i] = read_u64(fp + 8);
		fp = read_u64(fp);
	}
	/* The request the goroutine itself serves (net/http, or a gRPC
	 * reader goroutine's stream), else the gRPC stream in the deadline's
	 * context, else what the goroutine inherited from its creator. */
	const struct traceparent *tp = bpf_map_lookup_elem(&http_tp, &key);
	if (!tp || tp->src == TT_TP_GOROUTINE)
		grpc_stream_traceparent(tgid, GO_ARG1(ctx), GO_ARG2(ctx), &cr);
	if (tp && !cr.tp_src) {
		__builtin_memcpy(cr.traceparent, tp->s, sizeof(cr.traceparent));
		cr.tp_src = tp->src ? tp->src : TT_TP_HTTP;
	}
	bpf_map_update_elem(&creating, &key, &cr, BPF_ANY);
	return 0;
}

/* net/http.readRequest: a serving goroutine starts on its next request. */
SEC("uprobe")
int go_http_request(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_HTTP_REQUEST);
	struct pid_ptr key = {.pid = bpf_get_current_pid_tgid() >> 32, .ptr = GO_G(ctx)};
	bpf_map_delete_elem(&http_tp, &key);
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
	bpf_map_update_elem(&http_tp, &key, &tp, BPF_ANY);
	return 0;
}

SEC("uprobe")
int go_create_ret(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_CREATE_RET);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	struct pid_ptr key = {.pid = tgid, .ptr = GO_G(ctx)};
	struct creation *cr = bpf_map_lookup_elem(&creating, &key);
	if (!cr)
		return 0;
	__u64 c = GO_ARG2(ctx);
	cr->deadline_wall = read_u64(c + off->timerctx_deadline);
	cr->deadline_ext = (__s64)read_u64(c + off->timerctx_deadline + 8);
	/* Results: the Context interface (itab, data), then the CancelFunc.
	 * The data word is the *timerCtx (or a *cancelCtx when the parent's
	 * deadline was sooner; that entry is never consumed and is swept). */
	struct pid_ptr dkey = {.pid = tgid, .ptr = c};
	if (bpf_map_update_elem(&deadlines, &dkey, cr, BPF_ANY))
		hit(TT_GO_HIT_DETAIL_FULL);
	bpf_map_delete_elem(&creating, &key);
	return 0;
}

/*
 * The socket cookie of file descriptor fd of the current task: its file
 * table, the file's socket, the socket's sock. The cookie was generated by
 * the TCP collector's hooks (bpf_get_socket_cookie) when the socket first
 * sent or received; 0 when it never did.
 */
static __always_inline __u64 fd_cookie(__s64 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	if (!file)
		return 0;
	struct socket *sock = BPF_CORE_READ(file, private_data);
	if (!sock)
		return 0;
	return BPF_CORE_READ(sock, sk, __sk_common.skc_cookie.counter);
}

/*
 * The file descriptor behind a net.Conn interface (itab, data) when it is a
 * *net.TCPConn: conn.fd -> netFD.pfd.Sysfd; -1 otherwise (TLS...).
 */
static __always_inline __s64 tcpconn_fd(__u64 tab, __u64 data, __u64 tcpconn_itab, __u32 conn_fd, __u32 netfd_sysfd)
{
	if (!tcpconn_itab || tab != tcpconn_itab || !data)
		return -1;
	__u64 netfd = read_u64(data + conn_fd);
	if (!netfd)
		return -1;
	return (__s64)read_u64(netfd + netfd_sysfd);
}

/*
 * call_context fills what an outbound call's context allowed: the deadline
 * of the nearest timerCtx above it (none: has_deadline 0) and the span,
 * and, for a call with no deadline, the return addresses up to its caller.
 */
static __always_inline void call_context(struct pt_regs *ctx, struct tt_go_binding *b, __u32 tgid,
					 const struct tt_go_offsets *off, __u64 tab, __u64 data)
{
	for (int i = 0; i < TT_GO_CHAIN && tab && data; i++) {
		struct pid_ptr key = {.pid = tgid, .ptr = tab};
		const struct tt_go_ctx_itab *it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
		if (!it || it->parent_off == TT_GO_ROOT_CTX)
			break;
		if (it->is_timer && !b->has_deadline) {
			b->has_deadline = 1;
			b->deadline_wall = read_u64(data + off->timerctx_deadline);
			b->deadline_ext = (__s64)read_u64(data + off->timerctx_deadline + 8);
		}
		if (it->is_value && !b->trace_found && off->has_otel) {
			struct span_ids ids = {};
			if (read_span(data, tgid, off, &ids) > 0) {
				__builtin_memcpy(b->trace_id, ids.trace_id, sizeof(b->trace_id));
				__builtin_memcpy(b->span_id, ids.span_id, sizeof(b->span_id));
				b->trace_found = 1;
			}
		}
		__u64 next = data + it->parent_off;
		tab = read_u64(next);
		data = read_u64(next + 8);
	}
	if (!b->has_deadline) {
		/* Who made a call without a deadline: walk up to the caller. */
#if GO_HAS_LR
		b->pcs[0] = GO_LR(ctx);
#else
		b->pcs[0] = read_u64(GO_SP(ctx));
#endif
		__u64 fp = GO_FP(ctx);
		for (int i = 1; i < TT_GO_CALL_STACK; i++) {
			if (!fp)
				break;
			b->pcs[i] = read_u64(fp + 8);
			fp = read_u64(fp);
		}
	}
}

/*
 * net/http.(*persistConn).roundTrip, on the goroutine of the request: the
 * connection the request is written to. Plain TCP connections only (a TLS
 * connection's itab differs and is skipped).
 */
SEC("uprobe")
int go_http_roundtrip(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_ROUNDTRIP);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	__u64 pc = GO_ARG1(ctx);
	__s64 fd = tcpconn_fd(read_u64(pc + off->persistconn_conn), read_u64(pc + off->persistconn_conn + 8),
			      off->tcpconn_itab, off->conn_fd, off->netfd_sysfd);
	__u64 cookie = fd_cookie(fd);
	struct tt_go_binding *b = bpf_ringbuf_reserve(&go_bindings, sizeof(*b), 0);
	if (!b) {
		hit(TT_GO_HIT_DROPPED);
		return 0;
	}
	__builtin_memset(b, 0, sizeof(*b));
	b->ts_ns = bpf_ktime_get_ns();
	b->pid = tgid;
	b->goid = goid_of(GO_G(ctx), off);
	b->cookie = cookie;
	b->fd = fd;
	b->kind = TT_BIND_HTTP_ROUNDTRIP;

	/* The request's context: the nearest deadline and span above it. */
	__u64 req = read_u64(GO_ARG2(ctx)); /* transportRequest.Request */
	call_context(ctx, b, tgid, off, read_u64(req + off->request_ctx), read_u64(req + off->request_ctx + 8));
	bpf_ringbuf_submit(b, 0);
	return 0;
}

/* Each RET of net/http.(*persistConn).roundTrip: the call is over. */
SEC("uprobe")
int go_http_roundtrip_ret(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_ROUNDTRIP);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	struct tt_go_binding *b = bpf_ringbuf_reserve(&go_bindings, sizeof(*b), 0);
	if (!b) {
		hit(TT_GO_HIT_DROPPED);
		return 0;
	}
	__builtin_memset(b, 0, sizeof(*b));
	b->ts_ns = bpf_ktime_get_ns();
	b->pid = tgid;
	b->goid = goid_of(GO_G(ctx), off);
	b->kind = TT_BIND_HTTP_END;
	bpf_ringbuf_submit(b, 0);
	return 0;
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
	__u64 fields = read_u64(frame + go->meta_fields);
	__u64 n = read_u64(frame + go->meta_fields + 8);
	/* "tracepar" "ent", little-endian (amd64 and arm64) */
	const __u64 head = 0x7261706563617274ULL;
	for (int i = 0; i < 32; i++) {
		if (i >= n)
			break;
		__u64 f = fields + (__u64)i * go->hf_size;
		if (read_u64(f + go->hf_name + 8) != 11)
			continue;
		__u8 name[11] = {};
		if (bpf_probe_read_user(name, sizeof(name), (const void *)read_u64(f + go->hf_name)))
			continue;
		if (*(__u64 *)name != head || name[8] != 'e' || name[9] != 'n' || name[10] != 't')
			continue;
		if (read_u64(f + go->hf_value + 8) < TT_TRACEPARENT_LEN - 1)
			break;
		struct traceparent tp = {.src = TT_TP_GRPC};
		if (bpf_probe_read_user(tp.s, TT_TRACEPARENT_LEN - 1, (const void *)read_u64(f + go->hf_value)))
			break;
		bpf_map_update_elem(&grpc_tp, &sk, &tp, BPF_ANY);
		bpf_map_update_elem(&http_tp, &gkey, &tp, BPF_ANY);
		return 0;
	}
	/* No traceparent: this goroutine's previous stream must not lend its own. */
	bpf_map_delete_elem(&http_tp, &gkey);
	return 0;
}

/*
 * google.golang.org/grpc/internal/transport.(*http2Client).NewStream(t, ctx,
 * callHdr, handler), on the goroutine making the call: the transport (and
 * so the TCP connection) its stream opens on. Plaintext TCP only (TLS
 * wraps the net.Conn: skipped, not guessed).
 */
SEC("uprobe")
int go_grpc_new_stream(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_GRPC_STREAM);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	const struct tt_go_grpc_offsets *go = bpf_map_lookup_elem(&go_grpc, &tgid);
	if (!off || !go || !go->has_client)
		return 0;
	__u64 t = GO_ARG1(ctx);
	__s64 fd = tcpconn_fd(read_u64(t + go->client_conn), read_u64(t + go->client_conn + 8),
			      go->tcpconn_itab, go->conn_fd, go->netfd_sysfd);
	__u64 cookie = fd_cookie(fd);
	struct tt_go_binding *b = bpf_ringbuf_reserve(&go_bindings, sizeof(*b), 0);
	if (!b) {
		hit(TT_GO_HIT_DROPPED);
		return 0;
	}
	__builtin_memset(b, 0, sizeof(*b));
	b->ts_ns = bpf_ktime_get_ns();
	b->pid = tgid;
	b->goid = goid_of(GO_G(ctx), off);
	b->cookie = cookie;
	b->fd = fd;
	b->kind = TT_BIND_GRPC_STREAM;
	call_context(ctx, b, tgid, off, GO_ARG2(ctx), GO_ARG3(ctx));
	bpf_ringbuf_submit(b, 0);
	return 0;
}

/* Dial layout of each traced process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct tt_go_dial_offsets);
} go_dial SEC(".maps");

/* A connect in progress on a goroutine, under a deadline. */
struct dial {
	__u64 netfd;
	__u64 goid;   /* the goroutine that set the deadline (else the dialing one) */
};

/* Connects in flight: {pid, g} -> dial, from netFD.connect's entry to syscall.Connect's return. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct pid_ptr);
	__type(value, struct dial);
} dialing SEC(".maps");

const struct dial *unused_dial __attribute__((unused));

/*
 * net.(*netFD).connect(fd, ctx, la, ra), past its stack check: a connect
 * under a context. net/http dials on a goroutine of its own, under a
 * context that keeps the request's values (context.WithoutCancel): walk up
 * to the nearest deadline and bind the connection to the goroutine that set
 * it, as the detail tier recorded its creation.
 */
SEC("uprobe")
int go_dial_entry(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_DIAL);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	__u64 g = GO_G(ctx);
	struct pid_ptr gkey = {.pid = tgid, .ptr = g};
	__u64 tab = GO_ARG2(ctx), data = GO_ARG3(ctx);
	for (int i = 0; i < TT_GO_CHAIN; i++) {
		if (!tab || !data)
			break;
		struct pid_ptr key = {.pid = tgid, .ptr = tab};
		const struct tt_go_ctx_itab *it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
		if (!it || it->parent_off == TT_GO_ROOT_CTX)
			break;
		if (it->is_timer) {
			struct dial d = {.netfd = GO_ARG1(ctx), .goid = goid_of(g, off)};
			struct pid_ptr dkey = {.pid = tgid, .ptr = data};
			const struct creation *cr = bpf_map_lookup_elem(&deadlines, &dkey);
			if (cr)
				d.goid = cr->goid;
			bpf_map_update_elem(&dialing, &gkey, &d, BPF_ANY);
			return 0;
		}
		__u64 next = data + it->parent_off;
		tab = read_u64(next);
		data = read_u64(next + 8);
	}
	bpf_map_delete_elem(&dialing, &gkey);
	return 0;
}

static __always_inline void dial_bind(struct dial *d, __u32 tgid, __s64 fd)
{
	struct tt_go_binding *b = bpf_ringbuf_reserve(&go_bindings, sizeof(*b), 0);
	if (!b) {
		hit(TT_GO_HIT_DROPPED);
		return;
	}
	__builtin_memset(b, 0, sizeof(*b));
	b->ts_ns = bpf_ktime_get_ns();
	b->pid = tgid;
	b->goid = d->goid;
	b->cookie = fd_cookie(fd);
	b->fd = fd;
	b->kind = TT_BIND_DIAL;
	bpf_ringbuf_submit(b, 0);
}

/*
 * Each RET of syscall.Connect, which netFD.connect calls (through
 * connectFunc) once per connect: connect(2) has returned (in progress,
 * done or refused), so the SYN is out and the socket has its cookie.
 */
SEC("uprobe")
int go_dial_ret(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_DIAL);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_dial_offsets *dof = bpf_map_lookup_elem(&go_dial, &tgid);
	struct pid_ptr gkey = {.pid = tgid, .ptr = GO_G(ctx)};
	struct dial *d = bpf_map_lookup_elem(&dialing, &gkey);
	if (!dof || !d)
		return 0;
	dial_bind(d, tgid, (__s64)read_u64(d->netfd + dof->netfd_pfd + dof->pfd_sysfd));
	bpf_map_delete_elem(&dialing, &gkey);
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
	inherited.src = TT_TP_GOROUTINE;
	bpf_map_update_elem(&http_tp, &ckey, &inherited, BPF_ANY);
	return 0;
}
