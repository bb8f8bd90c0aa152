/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Events shared between bpf/tcp.bpf.c and collector/ (bpf2go -type generates the Go side). */
#ifndef TT_TCP_EVENT_H
#define TT_TCP_EVENT_H

/* Kinds of TCP events. Numbers are part of the record format: only append. */
enum tt_tcp_kind {
	TT_KIND_RTO = 1,               /* retransmit in CA state Loss: the retransmission timer fired */
	TT_KIND_FAST_RETRANSMIT = 2,   /* retransmit in CA state Recovery */
	TT_KIND_TLP = 3,               /* tail loss probe */
	TT_KIND_SYN_RETRANSMIT = 4,    /* SYN resent in SYN_SENT */
	TT_KIND_RETRANSMIT = 5,        /* any other retransmit (Open/Disorder/CWR, not a probe) */
	TT_KIND_RESET_RECEIVED = 6,
	TT_KIND_RESET_SENT = 7,
	TT_KIND_CONNECT_FAILED = 8,    /* SYN_SENT -> CLOSE with an error */
	TT_KIND_SOCKET_ERROR = 9,      /* error report on a connected socket */
	TT_KIND_ZERO_WINDOW = 10,      /* the zero-window probe timer fired: the peer advertises no window */
	TT_KIND_SYNACK_RETRANSMIT = 11,/* server side: SYN-ACK resent */
	TT_KIND_CONNECT_ABORTED = 12,  /* SYN_SENT -> CLOSE without an error: the application gave up */
	TT_KIND_CONNECT = 13,          /* lifecycle: CLOSE -> SYN_SENT */
	TT_KIND_ESTABLISHED = 14,      /* lifecycle: handshake done (client or server side) */
	TT_KIND_CLOSE = 15,            /* lifecycle: -> CLOSE from a connected state */
	TT_KIND_ACTIVITY = 16,         /* the owner sent or received (at most once per interval per socket,
	                                  and whenever another goroutine does the I/O) */
	TT_KIND_CLOSING = 17,          /* lifecycle: this side closed a connected socket (ESTABLISHED -> FIN_WAIT1,
	                                  CLOSE_WAIT -> LAST_ACK): a cancelled call's connection is closed with it */
	TT_KIND_RETRANSMIT_ACKED = 18, /* everything sent before the socket's last retransmit is acknowledged:
	                                  noticed at the owner's next send or receive (tp_btf only) */
};

/* Direction of an activity event. */
#define TT_DIR_SEND 1
#define TT_DIR_RECV 2

/* Indexes of the per-CPU counters in the stats map. */
enum tt_stat {
	TT_STAT_EMITTED = 0,      /* events written to the ring buffer */
	TT_STAT_LOST = 1,         /* events dropped because the ring buffer was full */
	TT_STAT_RATE_LIMITED = 2, /* events suppressed by the per-socket rate limit */
	TT_STAT_SOCKS_FULL = 3,   /* sockets not tracked because the socket table was full */
	TT_STAT_OWNER_HITS = 4,   /* process-context hook runs (owner recording) */
	TT_STAT_SOCKS_STALE = 5,  /* socket table entries left by a freed socket, found by the cookie of the one now at their address */
	TT_STAT_MAX = 6,
};

struct tt_tcp_event {
	__u64 ts_ns;        /* CLOCK_MONOTONIC */
	__u64 cookie;       /* socket cookie (a stable per-socket id) */
	__u64 cgroup_id;    /* owner's cgroup v2 id, 0 when unknown */
	__u32 pid;          /* owner tgid, 0 when unknown */
	__u32 netns;        /* network namespace inode */
	__u8 comm[16];      /* owner's comm */
	__u8 saddr[16];     /* IPv4 in the first 4 bytes, or IPv6 */
	__u8 daddr[16];
	__u16 sport;        /* host byte order */
	__u16 dport;
	__u16 family;       /* AF_INET or AF_INET6 */
	__u8 kind;          /* enum tt_tcp_kind */
	__u8 state;         /* TCP state at the event (for lifecycle events, the new state) */
	__u8 old_state;     /* for state changes, the previous state */
	__u8 ca_state;      /* icsk_ca_state */
	__u8 pending;       /* icsk_pending: which timer is armed */
	__u8 backoff;       /* icsk_backoff */
	__u8 retransmits;   /* icsk_retransmits: consecutive unanswered timeouts */
	__u8 _pad0[3];
	__s32 err;          /* errno (connect_failed, socket_error, retransmit error), reset reason (reset_sent) */
	__u32 srtt_us;
	__u32 rttvar_us;
	__u32 rto_jiffies;  /* icsk_rto: converted with the kernel's HZ in userspace */
	__u32 snd_cwnd;
	__u32 retrans_out;
	__u32 lost_out;
	__u32 total_retrans;
	__u32 snd_wnd;
	__u32 suppressed;   /* events of this socket dropped by the rate limit since the last one emitted */
	__u32 _pad1;
	__u64 goid;         /* activity: the Go goroutine doing the I/O (0: unknown, not Go, or runtime g0) */
	__u8 dir;           /* activity: TT_DIR_SEND or TT_DIR_RECV */
	__u8 _pad2[7];
};

#endif
