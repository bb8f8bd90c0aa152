/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Go deadline events shared between bpf/godeadline.bpf.c and collector/. */
#ifndef TT_GO_EVENT_H
#define TT_GO_EVENT_H

/* Where an expiry was seen. Numbers are part of the record format: only append. */
enum tt_go_expiry {
	TT_GO_TIMER_FIRED = 1,      /* the deadline's timer fired */
	TT_GO_EXPIRED_AT_CREATION = 2, /* WithDeadline was given a deadline already in the past */
};

/* Struct field offsets in the traced binary, resolved in userspace (DWARF, else a table by Go version). */
struct tt_go_offsets {
	__u32 timerctx_deadline;   /* context.timerCtx.deadline (a time.Time: wall, ext, loc) */
	__u32 cancelctx_err;       /* context.cancelCtx.err (atomic.Value: type word first) */
	__u32 cancelctx_children;  /* context.cancelCtx.children (map pointer; the map's first word is its length) */
	__u32 g_goid;              /* runtime.g.goid */
};

/* Indexes of the per-CPU probe hit counters. */
enum tt_go_hit {
	TT_GO_HIT_EXPIRY = 0,      /* cold: expiry call sites */
	TT_GO_HIT_CREATE_ENTRY = 1,/* detail: WithDeadlineCause entry */
	TT_GO_HIT_CREATE_RET = 2,  /* detail: WithDeadlineCause returns */
	TT_GO_HIT_DROPPED = 3,     /* events lost: ring buffer full */
	TT_GO_HIT_DETAIL_FULL = 4, /* creations not recorded: detail table full */
	TT_GO_HIT_MAX = 5,
};

struct tt_go_event {
	__u64 ts_ns;          /* CLOCK_MONOTONIC at the expiry */
	__u64 ctx;            /* the *timerCtx */
	__u64 goid;           /* goroutine running the expiry (the timer's, for fired timers) */
	__u64 deadline_wall;  /* time.Time.wall of the deadline */
	__s64 deadline_ext;   /* time.Time.ext */
	__u64 children;       /* direct children the expiry cancels */
	__u64 created_ns;     /* CLOCK_MONOTONIC at creation; 0 when the detail probes missed it */
	__u64 created_pcs[6]; /* return addresses up the stack of the code that set the deadline, innermost first */
	__u64 created_goid;   /* goroutine that set the deadline */
	__u32 pid;
	__u32 tid;
	__u8 kind;            /* enum tt_go_expiry */
	__u8 _pad[7];
};

#endif
