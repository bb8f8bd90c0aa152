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
};

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

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} go_events SEC(".maps");

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
		if (kind == TT_GO_TIMER_FIRED)
			bpf_map_delete_elem(&deadlines, &key);
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
