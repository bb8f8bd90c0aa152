// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Process starts and ends, for the node agent: it finds the Go programs that
 * start after it (exec) and detaches from those that end (the last thread of
 * the process exits). Two scheduler tracepoints, node-wide; each hit costs a
 * few hundred nanoseconds per exec or process exit, nothing per request.
 *
 * raw_tp only: both hooks run in the task concerned, so the current task is
 * all they read, and raw_tp exists on every kernel we support.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

enum tt_proc_kind {
	TT_PROC_EXEC = 1,
	TT_PROC_EXIT = 2,
};

struct tt_proc_event {
	__u64 ts_ns;
	__u32 tgid;
	__u32 kind;
	__u32 ppid;
	__u32 _pad;
	__u8 comm[16];
};

/* For bpf2go: the types userspace decodes. */
const struct tt_proc_event *tt_unused_proc_event __attribute__((unused));
const enum tt_proc_kind *tt_unused_proc_kind __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} proc_events SEC(".maps");

/* Events lost because the ring buffer was full, per CPU: userspace then
 * rescans /proc, so a lost event delays discovery, it does not lose a process. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} proc_lost SEC(".maps");

static __always_inline void emit(__u32 kind, struct task_struct *task)
{
	struct tt_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		__u32 k = 0;
		__u64 *n = bpf_map_lookup_elem(&proc_lost, &k);
		if (n)
			__sync_fetch_and_add(n, 1);
		return;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	e->kind = kind;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->_pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

SEC("raw_tp/sched_process_exec")
int proc_exec(struct bpf_raw_tracepoint_args *ctx)
{
	emit(TT_PROC_EXEC, (struct task_struct *)bpf_get_current_task());
	return 0;
}

SEC("raw_tp/sched_process_exit")
int proc_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	/* do_exit has decremented signal->live before this tracepoint: 0 means
	 * this is the last thread of the process. */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	emit(TT_PROC_EXIT, task);
	return 0;
}
