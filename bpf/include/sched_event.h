/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Types shared between bpf/sched.bpf.c and collector/ (bpf2go -type generates the Go side). */
#ifndef TT_SCHED_EVENT_H
#define TT_SCHED_EVENT_H

/*
 * Run-queue wait of one traced process, cumulative since it was added:
 * userspace reads the deltas. Per CPU (summed by the reader).
 */
struct tt_rq_sum {
	__u64 wait_ns;   /* runnable-but-not-running time of its threads */
	__u64 waits;     /* waits that ended (a thread got a CPU) */
	__u64 threads;   /* per epoch, threads that waited at least once */
};

/* One Go stop-the-world pause, from stopTheWorldWithSema to startTheWorldWithSema's return. */
struct tt_gc_pause {
	__u64 start_ns;  /* CLOCK_MONOTONIC */
	__u64 end_ns;
	__u32 tgid;
	__u32 _pad;
};

/* Indexes of the per-CPU counters in the sched_stats map. */
enum tt_sched_stat {
	TT_SCHED_HITS = 0,         /* scheduler tracepoint program runs (every switch and wakeup on the node) */
	TT_SCHED_MATCHED = 1,      /* runs that concerned a traced process */
	TT_SCHED_THREADS_FULL = 2, /* thread wakeups not tracked: the thread table was full */
	TT_SCHED_GC_HITS = 3,      /* GC uprobe runs */
	TT_SCHED_GC_LOST = 4,      /* pauses dropped: the ring buffer was full */
	TT_SCHED_STAT_MAX = 5,
};

#endif
