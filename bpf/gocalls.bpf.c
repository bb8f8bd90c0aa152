// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Outbound calls of a traced Go program and the connections they use, from
 * uprobes of the detail tier (and of the deadline audit): net/http round
 * trips, gRPC client streams and dials under a deadline. Each records what
 * the call's context allowed (its deadline, its span) and binds the
 * goroutine to the socket (its cookie), on the go_bindings ring buffer.
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
#include "go_conn.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Request -> connection bindings (detail tier). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 512 * 1024);
} go_bindings SEC(".maps");

const struct tt_go_binding *unused_go_binding __attribute__((unused));
const enum tt_go_binding_kind *unused_go_binding_kind __attribute__((unused));
const struct tt_go_dial_offsets *unused_go_dial_offsets __attribute__((unused));

/*
 * call_context fills what an outbound call's context allowed: the deadline
 * of the nearest timerCtx above it (none: has_deadline 0) and the span,
 * and, for a call with no deadline, the return addresses up to its caller.
 */
static __always_inline void call_context(struct pt_regs *ctx, struct tt_go_binding *b, __u32 tgid,
					 const struct tt_go_offsets *off, __u64 tab, __u64 data)
{
	struct ctx_walk w = ctx_walk(tgid, tab, data);
	while (ctx_next(&w)) {
		if (w.it->is_timer && !b->has_deadline) {
			b->has_deadline = 1;
			b->deadline_wall = read_u64(w.data + off->timerctx_deadline);
			b->deadline_ext = (__s64)read_u64(w.data + off->timerctx_deadline + 8);
		}
		if (w.it->is_value && !b->trace_found && off->has_otel) {
			struct span_ids ids = {};
			if (read_span(w.data, tgid, off, &ids) > 0) {
				__builtin_memcpy(b->trace_id, ids.trace_id, sizeof(b->trace_id));
				__builtin_memcpy(b->span_id, ids.span_id, sizeof(b->span_id));
				b->trace_found = 1;
			}
		}
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
 * A net/http request written to the connection behind the net.Conn
 * (tab, data): bind the goroutine to its socket, with what the request's
 * context allowed.
 */
static __always_inline int http_roundtrip(struct pt_regs *ctx, __u32 tgid, const struct tt_go_offsets *off,
					  const struct tt_go_conn_layout *cl, __u64 tab, __u64 data, __u64 reqctx)
{
	__s64 fd = tcpconn_fd(tab, data, off->tcpconn_itab, off->conn_fd, off->netfd_sysfd, cl);
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

	/* The request's context (reqctx: the interface's address): the
	 * nearest deadline and span above it. */
	call_context(ctx, b, tgid, off, read_u64(reqctx), read_u64(reqctx + 8));
	bpf_ringbuf_submit(b, 0);
	return 0;
}

/*
 * net/http.(*persistConn).roundTrip(pc, treq), on the goroutine of the
 * request (HTTP/1): the connection the request is written to, plain TCP or
 * TLS.
 */
SEC("uprobe")
int go_http_roundtrip(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_ROUNDTRIP);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off)
		return 0;
	const struct tt_go_conn_layout *cl = bpf_map_lookup_elem(&go_conns, &tgid);
	__u64 pc = GO_ARG1(ctx);
	/* transportRequest embeds its *Request first. */
	return http_roundtrip(ctx, tgid, off, cl, read_u64(pc + off->persistconn_conn),
			      read_u64(pc + off->persistconn_conn + 8), read_u64(GO_ARG2(ctx)) + off->request_ctx);
}

/*
 * The HTTP/2 clients' roundTrip(cc, req, ...), on the goroutine of the
 * request: the standard library's (i 0: net/http's bundled copy, the
 * default for HTTPS; net/http/internal/http2 since Go 1.27) and
 * golang.org/x/net/http2's (i 1). The stream's frames are written by other
 * goroutines, but the request waits here, on this connection.
 */
static __always_inline int h2_roundtrip(struct pt_regs *ctx, int i)
{
	hit(TT_GO_HIT_ROUNDTRIP);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	const struct tt_go_conn_layout *cl = bpf_map_lookup_elem(&go_conns, &tgid);
	if (!off || !cl)
		return 0;
	__u64 conn = GO_ARG1(ctx) + cl->h2_tconn[i & 1];
	return http_roundtrip(ctx, tgid, off, cl, read_u64(conn), read_u64(conn + 8), GO_ARG2(ctx) + cl->h2_req_ctx[i & 1]);
}

SEC("uprobe")
int go_h2_roundtrip(struct pt_regs *ctx)
{
	return h2_roundtrip(ctx, 0);
}

SEC("uprobe")
int go_xh2_roundtrip(struct pt_regs *ctx)
{
	return h2_roundtrip(ctx, 1);
}

/* Each RET of a round trip (HTTP/1's or an HTTP/2 client's): the call is over. */
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
 * google.golang.org/grpc/internal/transport.(*http2Client).NewStream(t, ctx,
 * callHdr, handler), on the goroutine making the call: the transport (and
 * so the TCP connection) its stream opens on, plain TCP or through grpc-go's
 * TLS credentials.
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
			      go->tcpconn_itab, go->conn_fd, go->netfd_sysfd, bpf_map_lookup_elem(&go_conns, &tgid));
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
/* Deadlines up a dial's context chain whose goroutines it is bound to. */
#define TT_DIAL_DEADLINES 4

struct dial {
	__u64 netfd;
	/* The goroutines that set the deadlines above the dial, nearest first
	 * (the nearest's creation unseen: the dialing goroutine). A request
	 * under http.DefaultTransport has two: the dialer's own 30 s
	 * (net.Dialer.Timeout, set on the dial goroutine) and the request's,
	 * above a WithoutCancel; bound to the nearest only, the request's
	 * expiry had no binding and came out unknown. */
	__u64 goid[TT_DIAL_DEADLINES];
	__u32 n;
	__u32 _pad;
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
	struct ctx_walk w = ctx_walk(tgid, GO_ARG2(ctx), GO_ARG3(ctx));
	struct dial d = {.netfd = GO_ARG1(ctx)};
	while (ctx_next(&w)) {
		if (!w.it->is_timer)
			continue;
		struct pid_ptr dkey = {.pid = tgid, .ptr = w.data};
		const struct creation *cr = bpf_map_lookup_elem(&deadlines, &dkey);
		__u64 goid;
		if (cr)
			goid = cr->goid;
		else if (d.n == 0)
			goid = goid_of(g, off);
		else
			continue; /* an outer deadline whose creation was not seen */
		bool dup = false;
		for (int i = 0; i < TT_DIAL_DEADLINES; i++)
			if (i < d.n && d.goid[i] == goid)
				dup = true;
		if (dup)
			continue;
		if (d.n < TT_DIAL_DEADLINES) {
			d.goid[d.n & (TT_DIAL_DEADLINES - 1)] = goid;
			d.n++;
		}
		if (d.n == TT_DIAL_DEADLINES)
			break;
	}
	if (d.n)
		bpf_map_update_elem(&dialing, &gkey, &d, BPF_ANY);
	else
		bpf_map_delete_elem(&dialing, &gkey);
	return 0;
}

static __always_inline void dial_bind(struct dial *d, __u32 tgid, __s64 fd)
{
	__u64 cookie = fd_cookie(fd);
	__u64 now = bpf_ktime_get_ns();
	for (int i = 0; i < TT_DIAL_DEADLINES; i++) {
		if (i >= d->n)
			break;
		struct tt_go_binding *b = bpf_ringbuf_reserve(&go_bindings, sizeof(*b), 0);
		if (!b) {
			hit(TT_GO_HIT_DROPPED);
			return;
		}
		__builtin_memset(b, 0, sizeof(*b));
		b->ts_ns = now;
		b->pid = tgid;
		b->goid = d->goid[i];
		b->cookie = cookie;
		b->fd = fd;
		b->kind = TT_BIND_DIAL;
		bpf_ringbuf_submit(b, 0);
	}
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

