// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Local causes of timeouts: how long the threads of traced processes waited
 * for a CPU (run-queue delay), from the scheduler's tracepoints, and the Go
 * runtime's stop-the-world pauses, from uprobes that fire once per pause.
 *
 * sched_switch and sched_wakeup run for every task on the node: the programs
 * look the task's tgid up in `traced` first and return at once for others.
 * Waits are summed per tgid in a per-CPU hash, cumulative: the reader takes
 * deltas, so nothing is reset under a running program. A thread's wait starts
 * when it is woken or preempted (still runnable) and ends when it is switched
 * in; the start is kept in an LRU hash by thread id (a thread that exits while
 * runnable leaves an entry the LRU reclaims).
 *
 * tp_btf programs with raw_tp twins (both read the tasks through CO-RE), as in
 * tcp.bpf.c. The task's state field is `__state` since 5.14, `state` before.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sched_event.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TT_TASK_RUNNING 0

struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

/* Traced processes: tgid -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} traced SEC(".maps");

/* Threads of traced processes: tid -> when it became runnable (0: running or asleep), epoch it last counted in. */
struct tt_thread {
	__u64 queued_ns;
	__u64 epoch;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct tt_thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct tt_rq_sum);
} rq_sums SEC(".maps");

/* [0]: the reader's epoch: it bumps it before each read, so threads count
 * once per interval. [1]: when the hooks were last all attached (ns): a wait
 * that started before is void (see dequeue). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} epoch SEC(".maps");

/* GC pauses in progress: tgid -> stopTheWorldWithSema's time. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} stw_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} gc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_SCHED_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} sched_stats SEC(".maps");

/* Forces bpf2go to emit the Go types. */
const struct tt_rq_sum *unused_rq_sum __attribute__((unused));
const struct tt_gc_pause *unused_gc_pause __attribute__((unused));
const enum tt_sched_stat *unused_sched_stat __attribute__((unused));

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&sched_stats, &idx);
	if (v)
		(*v)++;
}

/* Reads the value, not just the pointer: clang would otherwise OR the two
 * lookups' pointers in on_switch, which the verifier refuses. */
static __always_inline bool is_traced(__u32 tgid)
{
	__u8 *v = bpf_map_lookup_elem(&traced, &tgid);
	return v && *v;
}

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___old *)t, state);
}

/* The thread became runnable: its wait starts. */
static __always_inline void enqueue(__u32 tid, __u64 now)
{
	struct tt_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (th) {
		if (!th->queued_ns)
			th->queued_ns = now;
		return;
	}
	struct tt_thread n = { .queued_ns = now };
	if (bpf_map_update_elem(&threads, &tid, &n, BPF_NOEXIST) && bpf_map_update_elem(&threads, &tid, &n, BPF_ANY))
		stat_inc(TT_SCHED_THREADS_FULL);
}

/* The thread left its CPU. Preempted (still runnable), it waits for a CPU
 * again from now; going to sleep, it waits for nothing. Either way a start
 * noted earlier is void: sched_wakeup also fires for a thread still on its
 * CPU (woken between setting its sleep state and calling schedule()), and a
 * start kept from then would count its run and its sleep as run-queue time
 * at its next switch-in. */
static __always_inline void switched_out(__u32 tid, bool runnable, __u64 now)
{
	struct tt_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (th) {
		th->queued_ns = runnable ? now : 0;
		return;
	}
	if (runnable)
		enqueue(tid, now);
}

/* The thread got a CPU: its wait ends. A wait that started before the hooks
 * were all attached is void: the hooks attach one by one, and a start noted
 * by sched_wakeup before sched_switch watched (or left from an earlier
 * attachment) would count the thread's runs and sleeps in between as
 * run-queue time (measured: 773 ms of waits in the first 6, 1.4 ms after a
 * 272 ms attachment, where the kernel's schedstat counted 62 us). */
static __always_inline void dequeue(__u32 tid, __u32 tgid, __u64 now)
{
	struct tt_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (!th || !th->queued_ns)
		return;
	__u64 queued = th->queued_ns;
	th->queued_ns = 0;
	__u32 zero = 0, one = 1;
	__u64 *since = bpf_map_lookup_elem(&epoch, &one);
	if (!since || !*since || queued < *since)
		return;
	__u64 wait = now > queued ? now - queued : 0;
	__u64 *ep = bpf_map_lookup_elem(&epoch, &zero);
	__u64 cur = ep ? *ep : 0;
	bool first = th->epoch != cur + 1; /* epoch stored +1 so that 0 means never */
	th->epoch = cur + 1;
	struct tt_rq_sum *s = bpf_map_lookup_elem(&rq_sums, &tgid);
	if (!s) {
		struct tt_rq_sum n = {};
		bpf_map_update_elem(&rq_sums, &tgid, &n, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&rq_sums, &tgid);
		if (!s)
			return;
	}
	s->wait_ns += wait;
	s->waits++;
	if (first)
		s->threads++;
}

static __always_inline int on_wakeup(struct task_struct *p)
{
	stat_inc(TT_SCHED_HITS);
	__u32 tgid = BPF_CORE_READ(p, tgid);
	if (!is_traced(tgid))
		return 0;
	stat_inc(TT_SCHED_MATCHED);
	enqueue(BPF_CORE_READ(p, pid), bpf_ktime_get_ns());
	return 0;
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev, struct task_struct *next)
{
	stat_inc(TT_SCHED_HITS);
	__u32 ptgid = BPF_CORE_READ(prev, tgid), ntgid = BPF_CORE_READ(next, tgid);
	bool pt = is_traced(ptgid), nt = is_traced(ntgid);
	if (!pt && !nt)
		return 0;
	stat_inc(TT_SCHED_MATCHED);
	__u64 now = bpf_ktime_get_ns();
	/* A preempted task stays runnable whatever the state it had set. */
	if (pt)
		switched_out(BPF_CORE_READ(prev, pid), preempt || task_state(prev) == TT_TASK_RUNNING, now);
	if (nt)
		dequeue(BPF_CORE_READ(next, pid), ntgid, now);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(btf_sched_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(btf_sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(btf_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(raw_sched_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(raw_sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(raw_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next);
}

/*
 * Go stop-the-world: a uprobe at runtime.stopTheWorldWithSema's entry and at
 * each return of runtime.startTheWorldWithSema (never uretprobes: Go moves
 * stacks). The world is stopped from one to the other; a pause is one pair,
 * per process (worldsema serializes them).
 */
SEC("uprobe")
int go_stw_stop(struct pt_regs *ctx)
{
	stat_inc(TT_SCHED_GC_HITS);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&stw_start, &tgid, &now, BPF_ANY);
	return 0;
}

SEC("uprobe")
int go_stw_start_ret(struct pt_regs *ctx)
{
	stat_inc(TT_SCHED_GC_HITS);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 *start = bpf_map_lookup_elem(&stw_start, &tgid);
	if (!start)
		return 0; /* attached mid-pause */
	__u64 s = *start;
	bpf_map_delete_elem(&stw_start, &tgid);
	struct tt_gc_pause *e = bpf_ringbuf_reserve(&gc_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(TT_SCHED_GC_LOST);
		return 0;
	}
	e->start_ns = s;
	e->end_ns = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->_pad = 0;
	/* Batched: a wakeup is an irq_work, i.e. a self-IPI, which traps
	 * through the hypervisor in a VM (~25 us measured here, in the
	 * service's GC pause) and wakes the agent (one wakeup per pause on a
	 * GC-heavy service). The reader polls every 100 ms; a backlog past
	 * 64 KiB wakes it at once. */
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&gc_events, BPF_RB_AVAIL_DATA) >= 64 * 1024)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	return 0;
}
