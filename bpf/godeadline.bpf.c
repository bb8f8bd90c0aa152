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
#include "go_maps.h"
#include "go_ctx.h"
#include "go_conn.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* WithDeadlineCause calls in flight: {pid, g} -> creation, from entry to RET. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct creation);
} creating SEC(".maps");

/*
 * The first span started below each live deadline: {pid, *timerCtx} ->
 * its IDs. For code that opens its span only inside the call made under
 * the deadline (an instrumented transport): the span is a descendant of the
 * deadline's context, not an ancestor. LRU: deadlines that are met are
 * never consumed.
 */
struct child_span {
	struct span_ids ids;
	/* The deadline's timerCtx.deadline when the span started: a deadline
	 * met in time leaves its entry behind, and the GC gives its address to
	 * a later context; without this, that context's expiry took the
	 * earlier request's span (5-7 % of reports with long-lived workers),
	 * and the later request's own span was refused (first child only). */
	__u64 deadline_wall;
	__s64 deadline_ext;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct child_span);
} child_spans SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} go_events SEC(".maps");

const struct tt_go_event *unused_go_event __attribute__((unused));
const struct tt_go_offsets *unused_go_offsets __attribute__((unused));
const enum tt_go_expiry *unused_go_expiry __attribute__((unused));
const enum tt_go_hit *unused_go_hit __attribute__((unused));
const enum tt_go_trace_status *unused_go_trace_status __attribute__((unused));
const struct tt_go_ctx_itab *unused_go_ctx_itab __attribute__((unused));
const struct tt_go_span_type *unused_go_span_type __attribute__((unused));
const struct tt_go_grpc_offsets *unused_go_grpc_offsets __attribute__((unused));
const enum tt_go_tp_source *unused_go_tp_source __attribute__((unused));
const enum tt_go_no_offset *unused_go_no_offset __attribute__((unused));
const enum tt_go_af_found *unused_go_af_found __attribute__((unused));
const enum tt_go_budget_src *unused_go_budget_src __attribute__((unused));
const enum tt_go_inbound_kind *unused_go_inbound_kind __attribute__((unused));
const enum tt_go_children_map *unused_go_children_map __attribute__((unused));
const struct creation *unused_creation __attribute__((unused));
const struct pid_ptr *unused_pid_ptr __attribute__((unused));
const struct grpc_stream *unused_grpc_stream __attribute__((unused));

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
	struct ctx_walk w = ctx_walk(tgid, read_u64(c + off->timerctx_parent), read_u64(c + off->timerctx_parent + 8));
	while (ctx_next(&w)) {
		e->trace_depth = w.depth;
		if (!w.it->is_value)
			continue;
		struct span_ids ids = {};
		int r = read_span(w.data, tgid, off, &ids);
		if (r < 0) {
			e->trace_status = TT_TRACE_UNKNOWN_CTX;
			e->stop_itab = w.tab;
			return;
		}
		if (r > 0) {
			__builtin_memcpy(e->trace_id, ids.trace_id, sizeof(e->trace_id));
			__builtin_memcpy(e->span_id, ids.span_id, sizeof(e->span_id));
			e->trace_flags = ids.flags;
			e->trace_status = TT_TRACE_FOUND;
			e->span_start_wall = ids.start_wall;
			e->span_start_ext = ids.start_ext;
			return;
		}
	}
	switch (w.end) {
	case CTX_END_ROOT:
		e->trace_status = TT_TRACE_ROOT;
		break;
	case CTX_END_UNKNOWN:
		e->trace_status = TT_TRACE_UNKNOWN_CTX;
		e->stop_itab = w.tab;
		break;
	default:
		e->trace_status = TT_TRACE_TOO_DEEP;
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
	struct ctx_walk w = ctx_walk(tgid, GO_ARG1(ctx), GO_ARG2(ctx));
	if (!ctx_next(&w) || !w.it->is_value)
		return 0;
	struct span_ids ids = {};
	if (read_span(w.data, tgid, off, &ids) <= 0)
		return 0;
	w.depth = 0; /* the bound counts the new span's ancestors */
	while (ctx_next(&w)) {
		if (w.it->is_timer) {
			struct pid_ptr dkey = {.pid = tgid, .ptr = w.data};
			struct child_span cs = {.ids = ids};
			cs.deadline_wall = read_u64(w.data + off->timerctx_deadline);
			cs.deadline_ext = (__s64)read_u64(w.data + off->timerctx_deadline + 8);
			const struct child_span *old = bpf_map_lookup_elem(&child_spans, &dkey);
			/* The first span below this deadline stays; an entry of
			 * another deadline once at this address is replaced. */
			if (old && old->deadline_wall == cs.deadline_wall && old->deadline_ext == cs.deadline_ext)
				return 0;
			bpf_map_update_elem(&child_spans, &dkey, &cs, BPF_ANY);
			return 0;
		}
	}
	return 0;
}

/*
 * frame_args is where the register arguments' spill slots of the function
 * whose frame pointer is fp begin, in its caller's frame: 16 bytes above
 * fp on amd64 (saved frame pointer, return address); on arm64 16 above the
 * caller's frame pointer (the caller's saved link register sits at its
 * stack pointer, 8 above its frame pointer).
 */
static __always_inline __u64 frame_args(__u64 fp)
{
#if GO_HAS_LR
	return read_u64(fp) + 16;
#else
	return fp + 16;
#endif
}

/*
 * captures: closure (a func value's *funcval) holds c, by one of its
 * captured words (WithDeadlineCause's cancel closes over its *timerCtx),
 * or through a captured func value (by value: the word is that funcval;
 * by reference: the word points to it) that does: net's dialCtx closure
 * around WithDeadline's cancel (Go 1.26).
 */
static __always_inline int captures(__u64 closure, __u64 c)
{
	if (!closure || !c)
		return 0;
#pragma unroll
	for (int k = 1; k < 4; k++) {
		__u64 w = read_u64(closure + 8 * k);
		if (w == c)
			return 1;
		if (w < 4096)
			continue;
		if (read_u64(w + 8) == c || read_u64(read_u64(w) + 8) == c)
			return 1;
	}
	return 0;
}

/*
 * budget_frame: pc, the return address into a frame whose frame pointer
 * is fp, is in a budget frame (tt_go_offsets.budget_lo) of the expiring
 * deadline: its budget, the duration the frame's receiver holds, goes
 * into the event (the first found). For net/http's frames, the deadline
 * is the one made from the frame's request's context (its data word the
 * deadline's parent). For net's DialContext, the one its own
 * WithDeadline made (a deferred cancel in the frame captures it, its
 * defer bit set) from the receiver's Timeout, its Deadline unset: a
 * deadline the caller set and passed in is not. Global: verified once.
 */
__noinline int budget_frame(struct tt_go_event *e, __u64 pc, __u64 fp, const struct tt_go_offsets *off)
{
	if (!e || !off || e->budget_pc)
		return 0;
#pragma unroll
	for (int b = 0; b < TT_BUDGET_FRAMES; b++) {
		if (!off->budget_lo[b] || pc <= off->budget_lo[b] || pc > off->budget_hi[b])
			continue;
		__u64 args = frame_args(fp);
		if (b == TT_BUDGET_DIALER_TIMEOUT - 1) {
			__u8 bits = 0;
			bpf_probe_read_user(&bits, sizeof(bits), (void *)(fp + (__s64)off->dial_defer_bits));
			int made = 0;
#pragma unroll
			for (int k = 0; k < TT_DIAL_DEFERS; k++) {
				if ((bits & (1 << k)) && captures(read_u64(fp + (__s64)off->dial_defer_slots + 8 * k), e->ctx))
					made = 1;
			}
			__u64 d = read_u64(args);
			if (!made || !d || read_u64(d + off->dialer_deadline) || read_u64(d + off->dialer_deadline + 8))
				return 0;
			e->budget_pc = pc;
			e->budget_ns = (__s64)read_u64(d + off->budget_recv[b]);
			e->budget_src = b + 1;
			return 0;
		}
		__u64 req = read_u64(args + off->budget_req[b]);
		if (req && e->parent_ctx && read_u64(req + off->request_ctx + 8) == e->parent_ctx) {
			e->budget_pc = pc;
			e->budget_ns = (__s64)read_u64(read_u64(args) + off->budget_recv[b]);
			e->budget_src = b + 1;
		}
		return 0;
	}
	return 0;
}

/*
 * read_budget walks each waiter's frames again (from its g, kept by
 * read_stack), past the frames kept, checking each in a budget frame's
 * range (budget_frame) until one gives the event's budget. Out of
 * read_stack's call chain, which is at the verifier's combined stack
 * limit. Global: verified once.
 */
__noinline int read_budget(struct tt_go_event *e, const struct tt_go_offsets *off)
{
	if (!e || !off)
		return 0;
	for (int i = 0; i < TT_GO_WAITERS; i++) {
		__u64 g = e->waiter_g[i];
		if (!g || e->budget_pc)
			break;
		__u64 fp = read_u64(g + off->g_sched_bp);
		for (int j = 1; j < TT_GO_WAIT_STACK + TT_BUDGET_EXTRA_FRAMES; j++) {
			if (!fp)
				break;
			__u64 pc = read_u64(fp + 8);
			fp = read_u64(fp);
			int in = 0;
#pragma unroll
			for (int b = 0; b < TT_BUDGET_FRAMES; b++)
				in |= off->budget_lo[b] && pc > off->budget_lo[b] && pc <= off->budget_hi[b];
			if (in) {
				budget_frame(e, pc, fp, off);
				if (e->budget_pc)
					break;
			}
		}
	}
	return 0;
}

/*
 * unwrap_iface: a is the address of an interface's data word (its itab
 * the word before); the address of the data word of the interface whose
 * itab is want: that one, or the one a wrapper holds first, up to
 * TT_IFACE_UNWRAP wrappers down. A wrapper (a middleware's ResponseWriter)
 * holds the one it wraps as its first field, embedded (httpsnoop's, which
 * otelhttp uses; Prometheus' responseWriterDelegator) or behind a pointer
 * embedded first (Prometheus' delegator combinations, struct{
 * *responseWriterDelegator; http.Flusher; ... }). Which one is told by the
 * interface type its first word's itab is for (an itab's first word): the
 * same as want's (the wrapped ResponseWriter, embedded), else that word is
 * the pointer. 0: none. The itab's address is only ever stored as the type
 * word of an interface holding that very type: a match is such an
 * interface. Alertmanager's API (otelhttp, Prometheus' duration handler,
 * otelhttp again, then TimeoutHandler) holds net/http's writer three down.
 */
static __always_inline __u64 unwrap_iface(__u64 a, __u64 want)
{
	if (read_u64(a - 8) == want)
		return a;
	__u64 inter = read_u64(want), d = read_u64(a);
#pragma unroll
	for (int u = 0; u < TT_IFACE_UNWRAP; u++) {
		if (!d)
			return 0;
		__u64 w0 = read_u64(d);
		if (w0 == want)
			return d + 8;
		if (w0 && read_u64(w0) == inter) { /* embedded: the wrapped one */
			d = read_u64(d + 8);
			continue;
		}
		__u64 w1 = w0 ? read_u64(w0) : 0; /* behind a pointer */
		if (w1 == want)
			return w0 + 8;
		if (!w1 || read_u64(w1) != inter)
			return 0;
		d = read_u64(w0 + 8);
	}
	return 0;
}

/*
 * resolve_itab_frames checks the waiters found in a waiting frame whose
 * argument is an interface of a known type (the first TT_ITAB_FRAMES
 * slots; waiter_cookie: the argument's address): the slot of the same
 * function whose itab it is, or a wrapper's first field's (unwrap_iface),
 * with the interface's data word; none: the frame is passed over. Global,
 * out of read_stack's call chain (the verifier's combined stack limit).
 */
__noinline int resolve_itab_frames(struct tt_go_event *e, const struct tt_go_conn_layout *cl)
{
	if (!e || !cl)
		return 0;
	for (int i = 0; i < TT_GO_WAITERS; i++) {
		if (!e->waiter_frame[i] || e->waiter_af[i])
			continue;
		__u32 k = (__u32)e->waiter_fd[i];
		if (k >= TT_ITAB_FRAMES)
			continue;
		__u64 a = e->waiter_cookie[i], d = 0;
		int found = -1;
#pragma unroll
		for (int kk = 0; kk < TT_ITAB_FRAMES; kk++) {
			if (found < 0 && cl->wait_itab[kk] && cl->wait_lo[kk] == cl->wait_lo[k]) {
				__u64 r = unwrap_iface(a, cl->wait_itab[kk]);
				if (r) {
					found = kk;
					d = read_u64(r);
				}
			}
		}
		if (found < 0) {
			e->waiter_frame[i] = 0;
			e->waiter_cookie[i] = 0;
			continue;
		}
		e->waiter_fd[i] = found;
		e->waiter_cookie[i] = d;
	}
	return 0;
}

/*
 * match_frame: frame j of waiter i, returning to pc with frame pointer fp,
 * when it is a waiting frame (the first slot whose range holds pc): its
 * argument's spill slot, kept in waiter_cookie until resolve_waiter_conns
 * replaces it; for an interface of a known type (the first TT_ITAB_FRAMES
 * slots), the slot's address, until resolve_itab_frames checks its type.
 */
static __always_inline void match_frame(struct tt_go_event *e, __u32 i, int j, __u64 pc, __u64 fp,
					const struct tt_go_conn_layout *cl)
{
#pragma unroll
	for (int k = 0; k < TT_WAIT_FRAMES; k++) {
		if (pc > cl->wait_lo[k] && pc <= cl->wait_hi[k] && !e->waiter_frame[i]) {
			__u64 a = frame_args(fp) + cl->wait_arg[k];
			e->waiter_cookie[i] = k < TT_ITAB_FRAMES ? a : read_u64(a);
			e->waiter_fd[i] = k;
			e->waiter_frame[i] = j + 1;
		}
	}
}

/*
 * read_stack fills waiter i's stack from goroutine g's saved state (the pc
 * it parked at, g.sched.pc in gopark, then the return addresses up Go's
 * frame pointers from g.sched.bp), and its first waiting frame's receiver
 * (struct tt_go_conn_layout), resolved later by resolve_waiter_conns; and
 * the event's budget (tt_go_event.budget_ns), from the first budget frame
 * of the expiring deadline (net/http's Client.Timeout,
 * http.TimeoutHandler's duration, net.Dialer's Timeout), by read_budget once
 * the waiters are read, from g (waiter_g). A global function, like
 * read_chan_waiters: verified once, not at each of its four callers (16
 * waiting frames inlined at each took go_timer_fired past the verifier's
 * million instructions on arm64).
 */
__noinline int read_stack(struct tt_go_event *e, __u32 i, __u64 g, const struct tt_go_offsets *off,
			  const struct tt_go_conn_layout *cl)
{
	if (!e || !off)
		return 0;
	asm volatile("" : "+r"(i));
	i &= TT_GO_WAITERS - 1;
	e->waiter_pcs[i][0] = read_u64(g + off->g_sched_pc);
	__u64 fp = read_u64(g + off->g_sched_bp);
	e->waiter_g[i] = g;
	for (int j = 1; j < TT_GO_WAIT_STACK; j++) {
		if (!fp)
			break;
		__u64 pc = read_u64(fp + 8);
		e->waiter_pcs[i][j] = pc;
		fp = read_u64(fp); /* the frame pointer of pc's function */
		if (!cl)
			continue;
		if (!e->getconn_fp && pc > cl->getconn_lo && pc <= cl->getconn_hi)
			e->getconn_fp = fp;
		if (e->waiter_frame[i])
			continue;
		match_frame(e, i, j, pc, fp, cl);
	}
	return 0;
}

/*
 * read_chan_waiters adds the goroutines parked on cancelCtx c's Done
 * channel (its receive queue, sudog by sudog: the close that wakes them
 * comes after this probe), each with its stack: the pc it parked at
 * (g.sched.pc, in gopark) and the return addresses up Go's frame pointers
 * from g.sched.bp. A Done channel never asked for (nil) has no waiters.
 *
 * A global function, not inlined: the verifier checks it once, on its
 * own, instead of once for each of its nine calls (the context's and up
 * to eight children's), each a 4 x 12 x 8 loop nest. go_timer_fired
 * verified in 1.3 s, most of an attach, before (docs/design.md). Its
 * pointer arguments may be NULL to the verifier, so it checks them: e (a
 * ring buffer record) and off (a map value) never are, cl is when the
 * process has no connection layout.
 */
__noinline int read_chan_waiters(struct tt_go_event *e, __u64 c, const struct tt_go_offsets *off,
				 const struct tt_go_conn_layout *cl)
{
	if (!e || !off)
		return 0;
	__u64 ch = read_u64(c + off->cancelctx_done + 8);
	if (!ch)
		return 0;
	__u64 sg = read_u64(ch + off->hchan_recvq_first);
	for (int k = 0; k < TT_GO_WAITERS; k++) {
		__u32 i = e->waiters;
		if (!sg || i >= TT_GO_WAITERS)
			break;
		/* For kernel 6.1's verifier, which loses the bound of an index read
		 * back from the event: a mask the compiler cannot drop as redundant. */
		asm volatile("" : "+r"(i));
		i &= TT_GO_WAITERS - 1;
		__u64 g = read_u64(sg + off->sudog_g);
		if (!g)
			break;
		e->waiter_goid[i] = read_u64(g + off->g_goid);
		if (off->g_selectdone) {
			__u32 done = 0;
			bpf_probe_read_user(&done, sizeof(done), (void *)(g + off->g_selectdone));
			e->waiter_woken[i] = done != 0;
		}
		read_stack(e, i, g, off, cl);
		e->waiters = i + 1;
		sg = read_u64(sg + off->sudog_next);
	}
	return 0;
}

/*
 * deep_frame walks waiter i's frames again from g, past the
 * TT_GO_WAIT_STACK that read_stack kept, up to TT_DEEP_FRAMES more, for a
 * waiting frame, when read_stack found none: a goroutine read because it
 * is not parked on the context (the deadline's creator, the reader of
 * http.TimeoutHandler's inbound connection) may wait deeper, a net/http
 * handler reading its request body over TLS 14 frames above gopark
 * (crypto/tls's record reads under connReader.Read). The frame's return
 * address is kept in waiter_frame_pc (the stack kept stops before it).
 * Global, out of read_stack's call chain (the verifier's combined stack
 * limit): verified once.
 */
__noinline int deep_frame(struct tt_go_event *e, __u32 i, __u64 g, const struct tt_go_offsets *off,
			  const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !cl)
		return 0;
	asm volatile("" : "+r"(i));
	i &= TT_GO_WAITERS - 1;
	if (e->waiter_frame[i])
		return 0;
	__u64 fp = read_u64(g + off->g_sched_bp);
	for (int j = 1; j < TT_GO_WAIT_STACK + TT_DEEP_FRAMES; j++) {
		if (!fp)
			break;
		__u64 pc = read_u64(fp + 8);
		fp = read_u64(fp);
		if (j < TT_GO_WAIT_STACK)
			continue;
		match_frame(e, i, j, pc, fp, cl);
		if (e->waiter_frame[i]) {
			e->waiter_frame_pc[i] = pc;
			break;
		}
	}
	return 0;
}

/* runtime.g.atomicstatus values (runtime2.go, unchanged since Go 1.0). */
#define TT_G_RUNNABLE 1
#define TT_G_WAITING 4
#define TT_G_SCAN 0x1000

/*
 * read_creator adds the goroutine that set the deadline (g, recorded at
 * its creation by the detail tier) as one more waiter, when it was parked
 * at the expiry in a waiting frame and is not among the context's waiters
 * already: a net/http handler reading its request body waits on the
 * connection, not on its context; a dial waits for its handshake in
 * the poller. Only a goroutine that is not running has a saved stack that
 * is its own: parked (_Gwaiting), or readied and not run since
 * (_Grunnable: a dial's socket deadline, set to the context's, fires in
 * the same instant as the context's timer, whose callback runs on a
 * goroutine of its own, after). Only a g still running the same goroutine
 * (its goid: a g is reused after its goroutine exits) is the creator.
 * Global, like read_chan_waiters: verified once.
 */
__noinline int read_creator(struct tt_go_event *e, __u64 g, __u64 goid, const struct tt_go_offsets *off,
			    const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !cl || !g || !off->g_atomicstatus)
		return 0;
	if (read_u64(g + off->g_goid) != goid)
		return 0;
	__u32 st = 0;
	bpf_probe_read_user(&st, sizeof(st), (void *)(g + off->g_atomicstatus));
	st &= ~TT_G_SCAN;
	if (st != TT_G_WAITING && st != TT_G_RUNNABLE)
		return 0;
	__u32 n = e->waiters;
	if (n >= TT_GO_WAITERS)
		return 0;
	for (int k = 0; k < TT_GO_WAITERS; k++)
		if (k < n && e->waiter_goid[k] == goid)
			return 0;
	__u32 i = n;
	asm volatile("" : "+r"(i));
	i &= TT_GO_WAITERS - 1;
	read_stack(e, i, g, off, cl);
	deep_frame(e, i, g, off, cl);
	if (!e->waiter_frame[i])
		return 0; /* parked elsewhere: userspace reads only e->waiters entries */
	e->waiter_goid[i] = goid;
	e->waiter_creator[i] = 1;
	e->waiters = i + 1;
	return 0;
}

/*
 * children_group returns the one group of cancelCtx c's children map (a
 * Swiss map small enough to be one group of 8 slots), its control word in
 * *ctrl; 0 when c has no children or more than one group holds them.
 * Before Go 1.24 (TT_CHILDREN_HMAP) the map is a runtime.hmap: with B 0
 * (at most 8 entries) its one bucket, whose tophash bytes (an entry's is
 * at least 5: 0 and 1 are empty, 2-4 evacuated) are made a Swiss control
 * word (high bit set: no entry), so that child_at reads both alike.
 * Global: its stack is not added to its callers' (the expiry probes'
 * deepest call chain is near the verifier's 512 bytes).
 */
__noinline __u64 children_group(__u64 c, const struct tt_go_offsets *off, __u64 *ctrl)
{
	if (!off || !ctrl)
		return 0;
	__u64 m = read_u64(c + off->cancelctx_children);
	if (!m)
		return 0;
	if (off->has_children == TT_CHILDREN_HMAP) {
		if (read_u64(m + off->map_dirlen) & 0xff) /* B: one byte, little-endian */
			return 0;
		__u64 bucket = read_u64(m + off->map_dirptr);
		if (!bucket)
			return 0;
		__u64 top = read_u64(bucket), cw = 0;
#pragma unroll
		for (int s = 0; s < 8; s++)
			if (((top >> (8 * s)) & 0xff) < 5)
				cw |= 0x80ULL << (8 * s);
		*ctrl = cw;
		return bucket;
	}
	if (read_u64(m + off->map_dirlen) != 0)
		return 0;
	__u64 grp = read_u64(m + off->map_dirptr);
	if (grp)
		*ctrl = read_u64(grp);
	return grp;
}

/*
 * A children group's slot: {canceler, struct{}}, 24 bytes, not 16: Go pads
 * a struct that ends in a zero-size field (so that field's address cannot
 * point past it), and the map's slot type is such a struct. Read with a
 * stride of 16, every child but slot 0's was a misread (grpcurl's call, the
 * deadline's second child after its reflection stream, was never found).
 * TestChildrenSlotLayout checks the layout on the toolchain.
 */
#define TT_CHILD_SLOT 24
/* An hmap bucket's keys follow its 8 tophash bytes, 16 bytes each (the
 * struct{} values take no room). */
#define TT_CHILD_KEY 16

/* Slot s of a children group: the canceler interface's itab word. */
static __always_inline __u64 child_slot(__u64 grp, const struct tt_go_offsets *off, int s)
{
	return grp + 8 + (off->has_children == TT_CHILDREN_HMAP ? TT_CHILD_KEY : TT_CHILD_SLOT) * s;
}

/* The canceler in slot s of a children group (each canceler's cancelCtx
 * is first in it: the interface's data word, 8 bytes into the slot), 0 for
 * an empty or deleted slot; *itab its itab. Global, like children_group:
 * its stack is not its callers'. */
__noinline __u64 child_at(__u64 grp, __u64 ctrl, const struct tt_go_offsets *off, int s, __u64 *itab)
{
	if (!off || !itab || s < 0 || s > 7 || ((ctrl >> (8 * s)) & 0x80))
		return 0;
	__u64 slot = child_slot(grp, off, s);
	*itab = read_u64(slot);
	return read_u64(slot + 8);
}

/*
 * read_afterfunc adds the connection that AfterFunc child a of the
 * expiring context holds, when a's closure is one the layout knows
 * (af_fn): net's (*netFD).connect (Go 1.26+) registers one on the dial's
 * context that holds the *netFD, and waits for the handshake in the
 * poller, on no context; pgx's context watcher registers one per query
 * that holds the connection, read in the poller too. The closure's first
 * capture (the netFD; the watcher) is followed through af_via to a
 * net.Conn at af_conn, or is the netFD; checked: the netFD's pollDesc must
 * hold the netFD's descriptor (a misread word fails it). For connect, the
 * second capture is tried too. The goroutine parked on that descriptor in
 * the poller (pollDesc.rg, else .wg) is the call: its stack is read
 * (TT_AF_PARKED). None parked (a dial's socket deadline, set to the
 * context's, readied it in the same instant): the connection alone
 * (TT_AF_READIED), in the frame of connect's waiting frame for a dial.
 * Global, like read_chan_waiters: verified once.
 */
__noinline __u64 afterfunc_conn(struct tt_go_event *e, __u32 i, __u64 a, const struct tt_go_offsets *off,
				const struct tt_go_conn_layout *cl);

__noinline int read_afterfunc(struct tt_go_event *e, __u64 a, const struct tt_go_offsets *off,
			      const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !cl || !cl->afterfunc_f)
		return 0;
	__u32 i = e->waiters;
	if (i >= TT_GO_WAITERS)
		return 0;
	asm volatile("" : "+r"(i));
	i &= TT_GO_WAITERS - 1;
	__u64 pd = afterfunc_conn(e, i, a, off, cl);
	if (!pd)
		return 0;
	__u64 nfd = e->waiter_cookie[i];
	__u64 g = read_u64(pd + cl->polldesc_rg);
	if (g <= 2)
		g = read_u64(pd + cl->polldesc_wg);
	__u8 state = TT_AF_READIED;
	if (g > 2) {
		read_stack(e, i, g, off, cl);
		e->waiter_goid[i] = read_u64(g + off->g_goid);
		state = TT_AF_PARKED;
	} else {
		e->waiter_goid[i] = 0;
	}
	e->waiter_cookie[i] = nfd;
	if (!e->waiter_frame[i])
		e->waiter_frame[i] = 1;
	e->waiter_af[i] |= state;
	e->waiters = i + 1;
	return 0;
}

/*
 * afterfunc_conn: read_afterfunc's search, a global function of its own so
 * that its stack (the wrappers' walk) is not added to read_stack's below
 * read_afterfunc (the expiry probes' calls' combined stack is near the
 * verifier's 512 bytes). Returns the connection's pollDesc (0: none) and
 * fills waiter i's cookie (the netFD), wrapped flag, closure index (in
 * waiter_af, the state left for the caller) and, for a waiter not parked,
 * the pc of the registering call's waiting frame.
 */
__noinline __u64 afterfunc_conn(struct tt_go_event *e, __u32 i, __u64 a, const struct tt_go_offsets *off,
				const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !cl)
		return 0;
	__u64 f = read_u64(a + cl->afterfunc_f);
	if (!f)
		return 0;
	__u64 fn = read_u64(f);
	int k = -1;
#pragma unroll
	for (int j = 0; j < TT_AFTERFUNCS; j++)
		if (k < 0 && fn && cl->af_fn[j] == fn)
			k = j;
	if (k < 0)
		return 0;
	__u32 kk = k;
	asm volatile("" : "+r"(kk));
	kk &= TT_AFTERFUNCS - 1;
	__u64 nfd = 0, pd = 0;
	int wrapped = 0;
	for (int w = 1; w <= 2; w++) {
		__u64 p = read_u64(f + 8 * w);
#pragma unroll
		for (int h = 0; h < 2; h++)
			if (p && cl->af_via[kk][h])
				p = read_u64(p + cl->af_via[kk][h] - 1);
		if (p && cl->af_conn[kk])
			p = tcpconn_netfd(read_u64(p + cl->af_conn[kk] - 1), read_u64(p + cl->af_conn[kk] - 1 + 8),
					  off->tcpconn_itab, off->conn_fd, cl, &wrapped);
		if (!p)
			continue;
		__u64 q = read_u64(p + cl->netfd_pd);
		__u64 sysfd = read_u64(p + off->netfd_sysfd);
		if (q && sysfd < (1 << 20) && read_u64(q + cl->polldesc_fd) == sysfd) {
			nfd = p;
			pd = q;
			break;
		}
		if (cl->af_conn[kk] || cl->af_via[kk][0])
			break; /* only a bare netFD capture may be the second word */
	}
	if (!nfd)
		return 0;
	asm volatile("" : "+r"(i));
	i &= TT_GO_WAITERS - 1;
	e->waiter_cookie[i] = nfd;
	e->waiter_wrapped[i] = wrapped;
	e->waiter_af[i] = kk << 2;
	/* A pc in the registering call's waiting frame (connect's), for
	 * userspace to name it; read_stack replaces it for a parked waiter. */
	e->waiter_pcs[i][0] = cl->af_frame_pc[kk];
	return pd;
}

/*
 * read_children_waiters adds the waiters on the Done channels of c's
 * children. A global function, like read_chan_waiters: verified once.
 */
__noinline int read_children_waiters(struct tt_go_event *e, __u64 c, const struct tt_go_offsets *off,
				     const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !off->has_children)
		return 0;
	__u64 ctrl = 0;
	__u64 grp = children_group(c, off, &ctrl);
	if (!grp)
		return 0;
	for (int s = 0; s < 8; s++) {
		if (e->waiters >= TT_GO_WAITERS)
			break;
		__u64 itab = 0;
		__u64 child = child_at(grp, ctrl, off, s, &itab);
		if (!child)
			continue;
		if (cl && cl->afterfunc_itab && itab == cl->afterfunc_itab)
			read_afterfunc(e, child, off, cl);
		else
			read_chan_waiters(e, child, off, cl);
	}
	return 0;
}

/*
 * read_grandchildren_waiters adds the waiters on the Done channels of the
 * children of c's children: a call that waits two contexts below the
 * deadline (grpcurl's: its own WithCancel, then grpc-go's stream).
 * It reads c's children group again (about ten reads at an expiry) rather
 * than sharing one function with read_children_waiters: one function with
 * both loops, the second nested, took the Go programs' load from 0.24 s to
 * 0.5-0.67 s here, each call verified in its loop nest.
 */
__noinline int read_grandchildren_waiters(struct tt_go_event *e, __u64 c, const struct tt_go_offsets *off,
					  const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !off->has_children)
		return 0;
	__u64 ctrl = 0;
	__u64 grp = children_group(c, off, &ctrl);
	if (!grp)
		return 0;
	for (int s = 0; s < 8; s++) {
		if (e->waiters >= TT_GO_WAITERS)
			break;
		__u64 itab = 0;
		__u64 child = child_at(grp, ctrl, off, s, &itab);
		if (child)
			read_children_waiters(e, child, off, cl);
	}
	return 0;
}

/*
 * read_waiters fills who was waiting on the expiring context c: on its own
 * Done channel, then on its children's (net/http's transport waits on a
 * cancelCtx of its own below the request's), then on its grandchildren's,
 * for children maps small enough to be one group; at most TT_GO_WAITERS.
 */
/* Words of getConn's frame searched for its wantConn. */
#define TT_GETCONN_WORDS 48

/*
 * getconn_dial_ctx finds, in the frame of net/http's getConn (frame
 * pointer e->getconn_fp), the wantConn of the request whose context c is
 * expiring, and returns its dial context (0: none): the word w whose ctx
 * is a *cancelCtx whose parent is a withoutCancelCtx of c itself. Each
 * link is an itab compared for equality, so a stale or unrelated word
 * fails. The frame's locals lie below its frame pointer on amd64, above
 * it (past the saved frame pointer and link register) on arm64; reading
 * a few words beyond the frame is harmless (they fail the same tests).
 * Global: its stack is not added to the expiry probes' call chains.
 */
__noinline __u64 getconn_dial_ctx(struct tt_go_event *e, __u64 c, const struct tt_go_offsets *off,
				  const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !cl || !e->getconn_fp || !cl->cancelctx_itab || !cl->withoutcancel_itab)
		return 0;
#if GO_HAS_LR
	__u64 base = e->getconn_fp + 16;
#else
	__u64 base = e->getconn_fp - 8 * TT_GETCONN_WORDS;
#endif
	__u64 d = 0, wc = 0;
	for (int k = 0; k < TT_GETCONN_WORDS; k++) {
		__u64 w = read_u64(base + 8 * k);
		if (w < 4096 || read_u64(w + cl->wantconn_ctx) != cl->cancelctx_itab)
			continue;
		__u64 dd = read_u64(w + cl->wantconn_ctx + 8);
		if (!dd || read_u64(dd + off->timerctx_parent) != cl->withoutcancel_itab)
			continue;
		wc = read_u64(dd + off->timerctx_parent + 8);
		if (wc) {
			d = dd;
			break;
		}
	}
	if (!d)
		return 0;
	/* The request's context is the expiring one or below it (a value
	 * the program or its instrumentation added). */
	struct ctx_walk w = ctx_walk(e->pid, read_u64(wc + cl->withoutcancel_c), read_u64(wc + cl->withoutcancel_c + 8));
	while (ctx_next(&w)) {
		if (w.data == c)
			return d;
	}
	return 0;
}

static __always_inline void read_waiters(struct tt_go_event *e, __u64 c, const struct tt_go_offsets *off,
					 const struct tt_go_conn_layout *cl)
{
	read_chan_waiters(e, c, off, cl);
	if (e->waiters < TT_GO_WAITERS)
		read_children_waiters(e, c, off, cl);
	if (e->waiters < TT_GO_WAITERS)
		read_grandchildren_waiters(e, c, off, cl);
	/* A request waiting in the pool for its dial: the dial context's
	 * children, as the request's. */
	if (e->waiters < TT_GO_WAITERS && e->getconn_fp) {
		__u64 d = getconn_dial_ctx(e, c, off, cl);
		if (d) {
			read_children_waiters(e, d, off, cl);
			if (e->waiters < TT_GO_WAITERS)
				read_grandchildren_waiters(e, d, off, cl);
		}
	}
}

/*
 * read_inbound_reader: the first waiter whose waiting frame names an
 * inbound connection it does not read itself (wait_inbound: net/http's
 * (*timeoutHandler).ServeHTTP, waiting on its context while another
 * goroutine runs the handler) is not bound to it; the goroutine parked
 * reading that connection (its pollDesc's rg) is read as one more waiter,
 * with its stack, when it is parked in a waiting frame of its own (a
 * handler reading its request body, in net/http's connReader.Read; not the
 * server's background read, which waits for the next request). Over HTTP/2
 * (TT_INBOUND_PIPE) the goroutine waiting on the stream's body pipe is,
 * parked in the HTTP/2 server's body read.
 * waiter_af: TT_AF_INBOUND | the holder's index << 2 (userspace checks the
 * holder's spill slots were live). Global, like read_chan_waiters.
 */
__noinline int read_inbound_reader(struct tt_go_event *e, const struct tt_go_offsets *off,
				   const struct tt_go_conn_layout *cl)
{
	if (!e || !off || !cl)
		return 0;
	__u64 nfd = 0, g = 0;
	int wrapped = 0;
	__u32 holder = 0;
	for (int i = 0; i < TT_GO_WAITERS; i++) {
		if (!e->waiter_frame[i] || e->waiter_af[i])
			continue;
		__u32 k = (__u32)e->waiter_fd[i];
		asm volatile("" : "+r"(k));
		k &= TT_WAIT_FRAMES - 1;
		if (!cl->wait_inbound[k])
			continue;
		__u64 recv = e->waiter_cookie[i];
		e->waiter_frame[i] = 0; /* waits on its context, not on the connection */
		e->waiter_cookie[i] = 0;
		if (nfd || g || !recv)
			continue;
		if (cl->wait_via[k])
			recv = read_u64(recv + cl->wait_via[k] - 1);
		if (!recv)
			continue;
		if (cl->wait_inbound[k] == TT_INBOUND_PIPE) {
			/* HTTP/2: the stream's body pipe, its cond's first waiter. */
			if (cl->wait_via2[k])
				recv = read_u64(recv + cl->wait_via2[k] - 1);
			__u64 pipe = recv ? read_u64(recv + cl->wait_conn[k]) : 0;
			__u64 sg = pipe ? read_u64(pipe + cl->pipe_head) : 0;
			g = sg ? read_u64(sg + off->sudog_g) : 0;
			holder = i;
			continue;
		}
		__u64 at = recv + cl->wait_conn[k];
		__u64 tab = read_u64(at);
		nfd = tcpconn_netfd(tab, read_u64(at + 8), off->tcpconn_itab, off->conn_fd, cl, &wrapped);
		holder = i;
	}
	if (!g && nfd) {
		__u64 pd = read_u64(nfd + cl->netfd_pd);
		g = pd ? read_u64(pd + cl->polldesc_rg) : 0;
	}
	if (g <= 2) /* none; or pdNil, pdReady, pdWait: nobody parked reading it */
		return 0;
	__u32 n = e->waiters;
	if (n >= TT_GO_WAITERS)
		return 0;
	asm volatile("" : "+r"(n));
	n &= TT_GO_WAITERS - 1;
	read_stack(e, n, g, off, cl);
	deep_frame(e, n, g, off, cl);
	if (!e->waiter_frame[n])
		return 0; /* parked elsewhere: userspace reads only e->waiters entries */
	e->waiter_goid[n] = read_u64(g + off->g_goid);
	e->waiter_af[n] = TT_AF_INBOUND | (holder << 2);
	e->waiters = n + 1;
	return 0;
}

/*
 * resolve_waiter_conns turns each waiting frame's receiver (left in
 * waiter_cookie by read_chan_waiters, with the frame's kind in waiter_fd)
 * into the connection it holds: the net.Conn wait_conn bytes in, its
 * descriptor, its socket's cookie. The expiry runs on the timer's thread,
 * which shares the process's file table. A receiver whose connection is
 * not a TCP connection the layout can see through gets fd -1, cookie 0.
 */
static __always_inline void resolve_waiter_conns(struct tt_go_event *e, const struct tt_go_offsets *off,
						 const struct tt_go_conn_layout *cl)
{
	for (int i = 0; i < TT_GO_WAITERS; i++) {
		if (!e->waiter_frame[i]) {
			e->waiter_fd[i] = -1;
			continue;
		}
		__u32 k = (__u32)e->waiter_fd[i];
		asm volatile("" : "+r"(k));
		k &= TT_WAIT_FRAMES - 1;
		__u64 recv = e->waiter_cookie[i];
		e->waiter_cookie[i] = 0;
		e->waiter_fd[i] = -1;
		/* A frame of a known interface type is never bound itself (an
		 * inbound kind's, whose reader is: read_inbound_reader). */
		if (k < TT_ITAB_FRAMES)
			continue;
		/* An AfterFunc's waiter holds the *net.netFD itself. */
		int af_netfd = e->waiter_af[i] && (e->waiter_af[i] & 3) != TT_AF_INBOUND;
		if (recv && cl->wait_via[k] && !af_netfd)
			recv = read_u64(recv + cl->wait_via[k] - 1);
		if (recv && cl->wait_via2[k] && !af_netfd)
			recv = read_u64(recv + cl->wait_via2[k] - 1);
		if (!recv)
			continue;
		__s64 fd;
		if (af_netfd) {
			fd = recv ? (__s64)read_u64(recv + off->netfd_sysfd) : -1;
		} else if (cl->wait_netfd[k]) {
			fd = (__s64)read_u64(recv + off->netfd_sysfd);
		} else {
			__u64 at = recv + cl->wait_conn[k];
			__u64 tab = read_u64(at);
			fd = tcpconn_fd(tab, read_u64(at + 8), off->tcpconn_itab, off->conn_fd, off->netfd_sysfd, cl);
			e->waiter_wrapped[i] = tab != off->tcpconn_itab;
		}
		if (fd < 0)
			continue;
		e->waiter_fd[i] = (__s32)fd;
		struct sock *sk = fd_sock(fd);
		e->waiter_cookie[i] = sk_cookie(sk);
		e->waiter_unread[i] = sk_unread(sk, &e->waiter_rcv_age[i], &e->waiter_snd_age[i]);
		e->waiter_unacked[i] = sk_unacked(sk);
		e->waiter_ca_state[i] = sk_recovery(sk, &e->waiter_retrans_out[i], &e->waiter_lost_out[i]);
		e->waiter_sk_state[i] = sk_tcp_state(sk);
	}
}

/*
 * One deadline, two timers: net/http's Client.Timeout over a RoundTripper
 * that is not net/http's own arms a timer of its own beside the context's
 * (setRequestCancel); both fire at the deadline, and both are probed
 * (go_client_timer, go_timer_fired). Whichever probe runs first reports
 * the expiry and leaves a mark {pid, context} -> deadline; the other finds
 * the mark and reports nothing (TT_GO_HIT_MERGED). LRU: a mark whose
 * second timer never fires (the context cancelled in time) is left behind,
 * and a later context at the same address has another deadline.
 */
struct expiry_mark {
	__u64 deadline_wall;
	__s64 deadline_ext;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pid_ptr);
	__type(value, struct expiry_mark);
} expiry_marks SEC(".maps");

/* first_of_two: whether this is the first of the two timers of context c's
 * deadline to be seen (else it was reported by the other's probe). Global:
 * its stack is its own, not added to the expiry probes' (their calls'
 * combined stack is near the verifier's 512 bytes). */
__noinline int first_of_two(__u32 tgid, __u64 c, const struct tt_go_offsets *off)
{
	if (!off)
		return 1;
	struct pid_ptr key = {.pid = tgid, .ptr = c};
	struct expiry_mark m = {
		.deadline_wall = read_u64(c + off->timerctx_deadline),
		.deadline_ext = (__s64)read_u64(c + off->timerctx_deadline + 8),
	};
	if (!bpf_map_update_elem(&expiry_marks, &key, &m, BPF_NOEXIST))
		return 1;
	const struct expiry_mark *old = bpf_map_lookup_elem(&expiry_marks, &key);
	if (old && old->deadline_wall == m.deadline_wall && old->deadline_ext == m.deadline_ext) {
		bpf_map_delete_elem(&expiry_marks, &key);
		return 0;
	}
	bpf_map_update_elem(&expiry_marks, &key, &m, BPF_ANY); /* another context's, once at this address */
	return 1;
}

/*
 * on_expiry reports the expiry of the deadline of *timerCtx c, seen by
 * probe kind in process tgid (off: its layout).
 */
static __always_inline int on_expiry(struct pt_regs *ctx, __u8 kind, __u64 c, __u32 tgid,
				     const struct tt_go_offsets *off, __u64 parked)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	/* Already cancelled when its timer fired. By a parent's expiry (its
	 * DeadlineExceeded was copied here): the parent's expiry is the one to
	 * report. By the program itself, after the deadline had passed (a
	 * socket deadline set from the context fired first, the call returned
	 * and the caller cancelled before the timer's goroutine ran; or net/http's
	 * own Client.Timeout timer fired first, whose probe reported it): still
	 * this deadline's expiry. Without the type to tell them apart, neither
	 * is reported, and both are counted. */
	if (kind == TT_GO_TIMER_FIRED) {
		__u64 err = read_u64(c + off->cancelctx_err);
		if (err) {
			if ((!off->deadline_err_type && !off->deadline_err_itab) || err == off->deadline_err_type ||
			    err == off->deadline_err_itab) {
				hit(TT_GO_HIT_EXPIRY);
				hit(TT_GO_HIT_RACED);
				return 0;
			}
			kind = TT_GO_TIMER_FIRED_CANCELLED;
		}
	}
	/* With two timers, the second to be seen is merged into the first;
	 * decided after the waiters are read (below): the timer probe may run
	 * as net/http's doCancel wakes the request (its probe saw it waiting,
	 * and marked it first). */
	const struct tt_go_grpc_offsets *gt = bpf_map_lookup_elem(&go_grpc, &tgid);
	int two = (off->request_cancel || off->has_dial_timer || (gt && gt->has_timer)) && kind != TT_GO_EXPIRED_AT_CREATION;

	struct tt_go_event *e = bpf_ringbuf_reserve(&go_events, sizeof(*e), 0);
	if (!e) {
		if (two && !first_of_two(tgid, c, off)) {
			hit(TT_GO_HIT_MERGED);
			return 0;
		}
		hit(TT_GO_HIT_EXPIRY);
		hit(TT_GO_HIT_DROPPED);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->jiffies = bpf_jiffies64();
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
		/* A creation recorded for another context once at this address
		 * (its deadline met, the entry not swept yet, this one created
		 * while the detail tier was off): not this deadline's. */
		if (cr && (cr->deadline_wall != e->deadline_wall || cr->deadline_ext != e->deadline_ext)) {
			bpf_map_delete_elem(&deadlines, &key);
			hit(TT_GO_HIT_STALE);
			cr = NULL;
		}
	}
	e->parent_ctx = read_u64(c + off->timerctx_parent + 8);
	{
		struct task_struct *task = bpf_get_current_task_btf();
		e->proc_start_ns = BPF_CORE_READ(task, group_leader, start_time);
	}
	if (off->has_waiters && kind != TT_GO_EXPIRED_AT_CREATION && kind != TT_GO_TIMER_FIRED_CANCELLED) {
		const struct tt_go_conn_layout *cl = bpf_map_lookup_elem(&go_conns, &tgid);
		read_waiters(e, c, off, cl);
		/* The dial whose socket deadline fired: its goroutine, parked in
		 * connect (Go 1.21-1.25 wait on the context in a goroutine of
		 * their own; 1.26's AfterFunc found it already). Not the
		 * deadline's creator, as far as is known. */
		if (cl && parked) {
			__u32 n = e->waiters;
			read_creator(e, parked, read_u64(parked + off->g_goid), off, cl);
			if (e->waiters > n && n < TT_GO_WAITERS) {
				asm volatile("" : "+r"(n));
				n &= TT_GO_WAITERS - 1;
				e->waiter_creator[n] = 0;
			}
		}
		if (cl && cr)
			read_creator(e, cr->g, cr->goid, off, cl);
		if (cl) {
			resolve_itab_frames(e, cl);
			read_inbound_reader(e, off, cl);
			resolve_waiter_conns(e, off, cl);
		}
		read_budget(e, off);
		if (!cl)
			for (int i = 0; i < TT_GO_WAITERS; i++)
				e->waiter_fd[i] = -1;
	} else {
		for (int i = 0; i < TT_GO_WAITERS; i++)
			e->waiter_fd[i] = -1;
	}

	if (cr) {
		e->created_ns = cr->ts_ns;
		__builtin_memcpy(e->created_pcs, cr->pcs, sizeof(e->created_pcs));
		e->created_goid = cr->goid;
		/* Userspace uses it only when no span is found in the chain. */
		__builtin_memcpy(e->traceparent, cr->traceparent, sizeof(e->traceparent));
		e->traceparent_src = cr->tp_src;
		if (kind != TT_GO_EXPIRED_AT_CREATION)
			bpf_map_delete_elem(&deadlines, &key);
	}
	find_span(e, c, tgid, off);
	struct child_span *child = bpf_map_lookup_elem(&child_spans, &key);
	if (child) {
		if (child->deadline_wall != e->deadline_wall || child->deadline_ext != e->deadline_ext) {
			hit(TT_GO_HIT_STALE); /* another context's, once at this address */
		} else if (e->trace_status != TT_TRACE_FOUND) {
			__builtin_memcpy(e->trace_id, child->ids.trace_id, sizeof(e->trace_id));
			__builtin_memcpy(e->span_id, child->ids.span_id, sizeof(e->span_id));
			e->trace_flags = child->ids.flags;
			e->trace_status = TT_TRACE_CHILD_SPAN;
		}
		bpf_map_delete_elem(&child_spans, &key);
	}
	if (two && !first_of_two(tgid, c, off)) {
		bpf_ringbuf_discard(e, 0);
		hit(TT_GO_HIT_MERGED);
		return 0;
	}
	hit(TT_GO_HIT_EXPIRY);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* The expiry probes: the *timerCtx is the first argument of the cancel call. */
static __always_inline int on_cancel_call(struct pt_regs *ctx, __u8 kind)
{
	hit(TT_GO_HIT_COLD_RUN);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	if (!off) {
		hit(TT_GO_HIT_EXPIRY);
		return 0;
	}
	__u64 c = GO_ARG1(ctx);
	if (!c) {
		hit(TT_GO_HIT_EXPIRY);
		return 0;
	}
	return on_expiry(ctx, kind, c, tgid, off, 0);
}

SEC("uprobe")
int go_timer_fired(struct pt_regs *ctx)
{
	return on_cancel_call(ctx, TT_GO_TIMER_FIRED);
}

SEC("uprobe")
int go_expired_at_creation(struct pt_regs *ctx)
{
	return on_cancel_call(ctx, TT_GO_EXPIRED_AT_CREATION);
}

/* Words of a timer closure searched for its captured variables. */
#define TT_CLOSURE_WORDS 6

/*
 * closure_owner: the word of a closure (past its function word) that
 * points to an object whose word at field is another of the closure's
 * words: a captured pointer found by what it holds, not by its position
 * (doCancel's *http.Request, whose Cancel is its captured channel;
 * grpc-go's server stream, whose transport is its captured transport).
 * 0: none.
 */
static __always_inline __u64 closure_owner(__u64 closure, __u32 field)
{
	__u64 owner = 0;
	for (int i = 1; i < TT_CLOSURE_WORDS; i++) {
		__u64 p = read_u64(closure + 8 * i);
		if (owner || p < 4096)
			continue;
		__u64 v = read_u64(p + field);
		if (!v)
			continue;
		for (int j = 1; j < TT_CLOSURE_WORDS; j++)
			if (j != i && read_u64(closure + 8 * j) == v)
				owner = p;
	}
	return owner;
}

/*
 * client_timer_ctx finds, from doCancel's closure, the context of the
 * request it cancels: the *http.Request is the closure word whose
 * Request.Cancel is another of the words (the channel doCancel closes),
 * and its context must be a *timerCtx (by itab) not cancelled yet: by its
 * own timer (whose probe reported it), a parent's, or the program. 0: none.
 * Global: its stack is not added to go_client_timer's, whose calls'
 * combined stack is near the verifier's limit.
 */
__noinline __u64 client_timer_ctx(__u64 closure, __u32 tgid, const struct tt_go_offsets *off)
{
	hit(TT_GO_HIT_CLIENT_TIMER);
	if (!off || !off->request_cancel)
		return 0;
	__u64 req = closure_owner(closure, off->request_cancel);
	if (!req)
		return 0;
	__u64 tab = read_u64(req + off->request_ctx), c = read_u64(req + off->request_ctx + 8);
	struct pid_ptr ikey = {.pid = tgid, .ptr = tab};
	const struct tt_go_ctx_itab *it = bpf_map_lookup_elem(&go_ctx_itabs, &ikey);
	if (!c || !it || !it->is_timer || read_u64(c + off->cancelctx_err))
		return 0;
	return c;
}

/*
 * go_client_timer: the entry (past the prologue) of net/http's doCancel,
 * the closure setRequestCancel's goroutine calls when the timer it armed
 * for Client.Timeout fires (a RoundTripper that is not net/http's own: a
 * wrapper, golang.org/x/net/http2's). Nothing has woken the round trip
 * yet: doCancel is what closes Request.Cancel. So the request's goroutine
 * is still parked on its context, with its stack, as at the context's own
 * expiry; but the context's timer would fire after the call returned and
 * the client cancelled the context (no waiter left), or not at all (its
 * timer stopped). This is that expiry, seen first. doCancel also runs
 * when the program closes the request's own Cancel channel before the
 * deadline: userspace drops those (the deadline is not past).
 */
SEC("uprobe")
int go_client_timer(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_COLD_RUN);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	__u64 c = client_timer_ctx(GO_CLOSURE(ctx), tgid, off); /* counts the hit */
	if (!c || !off)
		return 0;
	return on_expiry(ctx, TT_GO_CLIENT_TIMER, c, tgid, off, 0);
}

/*
 * grpc_timer_ctx finds, from the closure of grpc-go's server deadline timer
 * (operateHeaders' time.AfterFunc(timeout, func() { ...; t.closeStream(s,
 * ...) })), the stream's deadline context, or 0. The closure's words are
 * the transport, the stream and (since grpc-go 1.5x) a channel: the stream
 * is the word whose transport field's data word is another of them. Its
 * context is the first timerCtx up from the stream's ctx (the server's
 * WithTimeout, under the incoming metadata's valueCtx), not yet cancelled.
 * Global: verified once, its stack apart from go_grpc_timer's.
 */
__noinline __u64 grpc_timer_ctx(__u64 closure, __u32 tgid, const struct tt_go_offsets *off)
{
	hit(TT_GO_HIT_GRPC_TIMER);
	const struct tt_go_grpc_offsets *go = bpf_map_lookup_elem(&go_grpc, &tgid);
	if (!off || !go || !go->has_timer)
		return 0;
	/* The transport field is an interface: its data word. */
	__u64 stream = closure_owner(closure, go->stream_st + 8);
	if (!stream)
		return 0;
	__u64 common = go->stream_embed == TT_GO_NO_EMBED ? stream : read_u64(stream + go->stream_embed);
	if (!common)
		return 0;
	struct ctx_walk w = ctx_walk(tgid, read_u64(common + go->stream_ctx), read_u64(common + go->stream_ctx + 8));
	while (ctx_next(&w)) {
		if (!w.it->is_timer)
			continue;
		return read_u64(w.data + off->cancelctx_err) ? 0 : w.data;
	}
	return 0;
}

/*
 * go_grpc_timer: the entry (past the prologue) of grpc-go's server deadline
 * timer closure. The handler is still parked on the stream's context: the
 * closure's closeStream is what cancels it. When this timer's goroutine
 * runs before the context's own, the context's timer then finds it
 * cancelled and nobody waiting; this is that expiry, seen first (the
 * second probe to see it is merged, as for net/http's Client.Timeout).
 */
SEC("uprobe")
int go_grpc_timer(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_COLD_RUN);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	__u64 c = grpc_timer_ctx(GO_CLOSURE(ctx), tgid, off); /* counts the hit */
	if (!c || !off)
		return 0;
	return on_expiry(ctx, TT_GO_SERVER_TIMER, c, tgid, off, 0);
}

/* Words of net's (*netFD).connect frame searched for its context. */
#define TT_DIAL_FRAME_WORDS 48

/*
 * dial_timer_ctx finds the deadline a dial's socket write deadline was set
 * from, when that deadline's timer fires (runtime.netpollWriteDeadline's
 * first argument: an any holding the *pollDesc indirectly, its data word
 * points to pd.self). net's (*netFD).connect sets the socket's write
 * deadline to its context's Deadline() and waits writable in the poller:
 * both timers fire at the deadline, and when the socket's runs first the
 * dial returns "i/o timeout" and the program may exit, or cancel the
 * context, before the context's own fires (goose: 2 of 5 runs unseen).
 * The goroutine parked writing (pd.wg, read before this timer readies it)
 * must be in connect's frame a few frames up; the context is found there
 * by value, from connect's spill slots down through its locals: a word
 * that is a context type's itab (go_ctx_itabs) followed by its data. Its
 * deadline is the first *timerCtx up the chain (one whose Deadline() is
 * not its parent's, withoutCancelCtx, ends the search), not cancelled yet
 * (by its own timer, whose probe reported it; the program). 0: none.
 * *parked: the goroutine. Global: verified once, its stack apart.
 */
__noinline __u64 dial_timer_ctx(__u64 arg, __u32 tgid, const struct tt_go_offsets *off, __u64 *parked)
{
	hit(TT_GO_HIT_DIAL_TIMER);
	const struct tt_go_conn_layout *cl = bpf_map_lookup_elem(&go_conns, &tgid);
	if (!off || !parked || !cl || !cl->dial_frame || !arg)
		return 0;
	__u64 pd = read_u64(arg);
	if (!pd)
		return 0;
	__u64 g = read_u64(pd + cl->polldesc_wg);
	if (g <= 2) /* pdNil, pdReady, pdWait: nobody parked */
		return 0;
	__u32 k = cl->dial_frame - 1;
	asm volatile("" : "+r"(k));
	k &= TT_WAIT_FRAMES - 1;
	__u64 lo = cl->wait_lo[k], hi = cl->wait_hi[k];
	__u64 fp = read_u64(g + off->g_sched_bp), below = 0, top = 0;
	for (int j = 0; j < 10 && fp && !top; j++) {
		__u64 pc = read_u64(fp + 8);
		below = fp;
		fp = read_u64(fp); /* the frame pointer of pc's function */
		if (pc > lo && pc <= hi)
			top = fp;
	}
	if (!top)
		return 0;
	/* From connect's second argument's data word (its spill slot: the
	 * receiver, then the context's itab and data) down to the bottom of
	 * its frame, where its callee's spill slots begin. */
	__u64 end = frame_args(below), a = frame_args(top) + 16, data = 0, tab = 0;
	for (int j = 0; j < TT_DIAL_FRAME_WORDS && a > end && !tab; j++) {
		__u64 w = read_u64(a - 8);
		struct pid_ptr key = {.pid = tgid, .ptr = w};
		if (w && bpf_map_lookup_elem(&go_ctx_itabs, &key)) {
			tab = w;
			data = read_u64(a);
		}
		a -= 8;
	}
	if (!tab)
		return 0;
	struct ctx_walk w = ctx_walk(tgid, tab, data);
	while (ctx_next(&w)) {
		if (w.it->no_deadline)
			return 0;
		if (!w.it->is_timer)
			continue;
		if (read_u64(w.data + off->cancelctx_err))
			return 0;
		*parked = g;
		return w.data;
	}
	return 0;
}

/*
 * go_dial_timer: the entry (past the prologue) of runtime.netpollWriteDeadline,
 * run when a socket's write deadline passes: no healthy call runs it (a
 * dial that connects in time resets its deadline). The expiry of the
 * context the dial's deadline came from, seen first; merged with the
 * context's own timer as the other second timers are.
 */
SEC("uprobe")
int go_dial_timer(struct pt_regs *ctx)
{
	hit(TT_GO_HIT_COLD_RUN);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct tt_go_offsets *off = bpf_map_lookup_elem(&go_procs, &tgid);
	__u64 parked = 0;
	__u64 c = dial_timer_ctx(GO_ARG2(ctx), tgid, off, &parked); /* counts the hit */
	if (!c || !off)
		return 0;
	return on_expiry(ctx, TT_GO_DIAL_TIMER, c, tgid, off, parked);
}

/*
 * grpc_stream_traceparent walks up from a new deadline's parent context
 * (itab tab, data) to the valueCtx grpc's server put the stream in
 * (grpc.streamKey -> *transport.ServerStream) and copies the traceparent
 * recorded for that stream, if any. Returns whether the context holds a
 * server stream: then the stream's traceparent, or none, is the request's.
 */
static __always_inline int grpc_stream_traceparent(__u32 tgid, __u64 tab, __u64 data, struct creation *cr)
{
	const struct tt_go_grpc_offsets *go = bpf_map_lookup_elem(&go_grpc, &tgid);
	if (!go || !go->has_server || !go->stream_key_type)
		return 0;
	struct ctx_walk w = ctx_walk(tgid, tab, data);
	while (ctx_next(&w)) {
		if (!w.it->is_value || read_u64(w.data + go->valuectx_key) != go->stream_key_type)
			continue;
		__u64 stream = read_u64(w.data + go->valuectx_val + 8);
		struct grpc_stream sk = {.pid = tgid, .transport = read_u64(stream + go->stream_st + 8)};
		__u64 common = go->stream_embed == TT_GO_NO_EMBED ? stream : read_u64(stream + go->stream_embed);
		bpf_probe_read_user(&sk.id, sizeof(sk.id), (const void *)(common + go->stream_id));
		const struct traceparent *tp = bpf_map_lookup_elem(&grpc_tp, &sk);
		if (tp) {
			__builtin_memcpy(cr->traceparent, tp->s, sizeof(cr->traceparent));
			cr->tp_src = TT_TP_GRPC;
		}
		return 1;
	}
	return 0;
}

/*
 * inherited_current: whether a traceparent inherited through `go`
 * statements is the request's whose context the new deadline (parent tab,
 * data) descends from. Its root must be a net/http serving goroutine still
 * on the same request (its entry the same header), and the deadline's
 * context must descend from that goroutine's connection context: a
 * connection serves one request at a time, so that is the request. A
 * long-lived goroutine a request once started (a worker pool, a
 * connection's loop) doing other requests' work fails one test or the
 * other. A gRPC reader goroutine's entry changes with every stream on the
 * connection and says nothing of which one a goroutine works for: streams
 * are found in the context instead (grpc_stream_traceparent), and what
 * was inherited from a reader is not used.
 */
/*
 * h2_stream_traceparent finds, up the deadline's context chain, the context
 * of a live HTTP/2 server stream (net/http's) with an inbound traceparent
 * (h2_stream_tp). 1: found, copied into cr.
 */
static __always_inline int h2_stream_traceparent(__u32 tgid, const struct tt_go_offsets *off, __u64 tab, __u64 data,
						 struct creation *cr)
{
	if (!off->h2_stream_ctx[0] && !off->h2_stream_ctx[1])
		return 0;
	struct ctx_walk w = ctx_walk(tgid, tab, data);
	while (ctx_next(&w)) {
		struct pid_ptr key = {.pid = tgid, .ptr = w.data};
		const struct traceparent *tp = bpf_map_lookup_elem(&h2_stream_tp, &key);
		if (tp) {
			__builtin_memcpy(cr->traceparent, tp->s, sizeof(cr->traceparent));
			cr->tp_src = TT_TP_HTTP2;
			return 1;
		}
	}
	return 0;
}

static __always_inline int inherited_current(__u32 tgid, const struct traceparent *tp, __u64 tab, __u64 data)
{
	struct pid_ptr rkey = {.pid = tgid, .ptr = tp->root};
	const struct traceparent *root = bpf_map_lookup_elem(&http_tp, &rkey);
	if (!root || root->src != TT_TP_HTTP || !root->conn_ctx)
		return 0;
	const __u64 *a = (const __u64 *)root->s, *b = (const __u64 *)tp->s;
#pragma unroll
	for (int i = 0; i < TT_TRACEPARENT_LEN / 8; i++) {
		if (a[i] != b[i])
			return 0;
	}
	__u64 want = root->conn_ctx;
	struct ctx_walk w = ctx_walk(tgid, tab, data);
	while (ctx_next(&w)) {
		if (w.data == want)
			return 1;
	}
	return 0;
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
	struct creation cr = {.ts_ns = bpf_ktime_get_ns(), .goid = goid_of(g, off), .g = g};
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
	int stream = 0;
	if (!tp || tp->src == TT_TP_GOROUTINE)
		stream = grpc_stream_traceparent(tgid, GO_ARG1(ctx), GO_ARG2(ctx), &cr);
	if (!stream && (!tp || tp->src == TT_TP_GOROUTINE))
		stream = h2_stream_traceparent(tgid, off, GO_ARG1(ctx), GO_ARG2(ctx), &cr);
	if (tp && !stream) {
		if (tp->src == TT_TP_GOROUTINE && !inherited_current(tgid, tp, GO_ARG1(ctx), GO_ARG2(ctx))) {
			cr.tp_src = TT_TP_STALE;
			hit(TT_GO_HIT_STALE_TRACE);
		} else {
			__builtin_memcpy(cr.traceparent, tp->s, sizeof(cr.traceparent));
			cr.tp_src = tp->src ? tp->src : TT_TP_HTTP;
		}
	}
	bpf_map_update_elem(&creating, &key, &cr, BPF_ANY);
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
