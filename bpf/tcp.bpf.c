// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel TCP events that can make a request time out: retransmits (classified
 * in the kernel), resets, failed connects, socket errors and zero windows, each
 * with a snapshot of the socket and the process that owns it.
 *
 * Only tracepoints: the kernels we run on may lack kprobes and fentry. Every
 * hook has a tp_btf program (typed args, socket cookies) and a raw_tp twin the
 * loader uses where tp_btf is missing. Both share one body, selected by a
 * compile-time `btf` flag, so the two cannot drift apart.
 *
 * Retransmit, RTO and reset events run in softirq or timer context where the
 * current task is unrelated to the socket: the owner is recorded from hooks that
 * run in process context (connect, listen, send, receive) in the socks table,
 * keyed by the socket's address, and read back through the socket.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "tcp_event.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TT_AF_INET 2
#define TT_AF_INET6 10
#define TT_IPPROTO_TCP 6
#define TT_IPPROTO_MPTCP 262

/* Only the field we need; CO-RE finds it in the running kernel's mptcp_sock. */
struct mptcp_sock___tt {
	struct sock *first;
} __attribute__((preserve_access_index));
#define TT_SOCK_STREAM 1

/* TCP states (include/net/tcp_states.h); stable kernel ABI. */
#define TT_TCP_ESTABLISHED 1
#define TT_TCP_SYN_SENT 2
#define TT_TCP_SYN_RECV 3
#define TT_TCP_FIN_WAIT1 4
#define TT_TCP_TIME_WAIT 6
#define TT_TCP_CLOSE 7
#define TT_TCP_CLOSE_WAIT 8
#define TT_TCP_LAST_ACK 9
#define TT_TCP_LISTEN 10
#define TT_TCP_NEW_SYN_RECV 12

/* icsk_pending values (include/net/inet_connection_sock.h). */
#define TT_ICSK_TIME_PROBE0 3
#define TT_ICSK_TIME_LOSS_PROBE 5

/* Set by the loader before load; frozen, so the verifier prunes dead branches. */
const volatile __u32 target_tgid = 0;          /* 0: every process */
const volatile bool emit_lifecycle = false;    /* connect/established/close events */
const volatile bool has_retransmit_err = false;/* tcp_retransmit_skb has its err argument (6.17+) */
const volatile __u64 tcp_write_timer_addr = 0; /* address of tcp_write_timer, 0: no zero-window events */
const volatile __u32 rate_burst = 64;          /* retransmit-class events per socket per window */
const volatile __u64 rate_window_ns = 1000000000ULL;
const volatile __u64 wakeup_bytes = 256 * 1024;/* wake the reader only past this much data */
const volatile __u64 activity_interval_ns = 0; /* 0: no activity events */

/* What we know of a socket, keyed by its kernel address. */
struct tt_sock {
	__u64 id;           /* socket cookie */
	__u64 cgroup_id;
	__u32 tgid;         /* 0 until a process-context hook saw the owner */
	__u32 netns;
	__u8 comm[16];
	__u64 window_start;
	__u32 window_count;
	__u32 suppressed;
	/* The local port, kept because the kernel zeroes it when a closing
	 * socket releases its port, before the error report and the close. */
	__u16 sport;
};

/*
 * A hash rather than SK_STORAGE: the zero-window hook derives the socket from
 * a timer pointer, which the verifier will not pass to bpf_sk_storage_get, and
 * raw_tp programs cannot use socket storage at all. Entries are deleted in
 * tcp_destroy_sock; a full table is counted (TT_STAT_SOCKS_FULL), never silent.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct tt_sock);
} socks SEC(".maps");

/*
 * What the hot path checks: the owner last recorded in socks. Socket storage
 * lives in the socket itself, a cache line the send path touches anyway;
 * the socks hash spreads over megabytes and costs a cache miss per lookup.
 * Only tp_btf programs can use it; raw_tp ones go to socks every time.
 */
struct tt_act_slot {
	__u64 goid;    /* a goroutine that did I/O on the socket */
	__u64 g;       /* its runtime.g pointer when last seen */
	__u64 last_ns; /* when its last activity event was emitted; 0: empty */
	__u32 epoch;   /* the activity epoch of that event */
	__u8 dirs;     /* TT_DIR_* already reported in that epoch */
	__u8 _pad[3];
};

struct tt_owner_seen {
	__u32 tgid;
	__u16 sport;
	__u16 _pad;
	/* The two goroutines last seen doing I/O on the socket. Two, because
	 * the common owners come in pairs: net/http's client writes from one
	 * goroutine (writeLoop) and reads from another (readLoop), a server's
	 * connection goroutine shares its socket with a background reader.
	 * With one slot every alternation was a takeover: two ring buffer
	 * events per HTTP request, ~1 us of BPF and the agent's CPU each. */
	struct tt_act_slot slot[2];
	/* A retransmit whose data is not known to be acknowledged yet: snd_una
	 * and snd_nxt when it was sent. Set by the retransmit hook (a timer or
	 * softirq, no owner context), checked by the owner's next send or
	 * receive: once snd_una has passed retx_nxt, everything the retransmit
	 * repeated is acknowledged, and one event says so. A tail loss probe
	 * answered at once (a peer that delays its ACKs, ~40 ms, longer than
	 * the probe timeout, 2 SRTT + 2 jiffies) is then told from one that
	 * went unanswered, without a hook on incoming ACKs. */
	__u32 retx_una;
	__u32 retx_nxt;
	__u8 retx_pending;
	__u8 _pad2[7];
};

/*
 * Go processes whose goroutines the activity events name: tgid -> offset of
 * goid in runtime.g. Filled by userspace for processes it traces with the
 * Go probes; other processes' registers mean nothing here.
 */
struct tt_go_pid {
	__u32 goid_off;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct tt_go_pid);
} go_pids SEC(".maps");

/*
 * How many processes go_pids holds (written by userspace): while it is 0,
 * the hot path skips the go_pids hash lookup (an array lookup is a direct
 * load once the verifier inlines it). Processes are in go_pids only while
 * their detail tier is on, so it is 0 nearly always.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} go_pids_n SEC(".maps");

/*
 * Listening sockets' owners, by network namespace and port: an accepted
 * socket is born in softirq, where no process is current, and its owner is
 * the listener's. Recorded at listen() (process context) or adopted from
 * /proc by userspace for listeners older than the collector; read when a
 * passive open completes (SYN_RECV -> ESTABLISHED). With this the receive
 * hook, which ran on every read, is not needed to attribute servers'
 * sockets before they first answer. LRU: bounded, stale ports age out.
 */
struct tt_listen_key {
	__u32 netns;
	__u16 port;
	__u16 _pad;
};

struct tt_owner {
	__u64 cgroup_id;
	__u32 tgid;
	__u32 _pad;
	__u8 comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tt_listen_key);
	__type(value, struct tt_owner);
} listeners SEC(".maps");

/*
 * The activity epoch, advanced by userspace every activity interval: a
 * socket's goroutine is sampled once per epoch and direction. The hot path
 * compares epochs (an inlined array load) instead of reading the clock:
 * the helper call, and its return through this machine's return-thunk
 * mitigation, was a sixth of the send hook.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} act_epoch SEC(".maps");

/*
 * Sockets older than the collector that userspace adopted for a traced
 * process (AdoptSockets), by cookie: looked up only when an event's socket
 * has no owner yet, and deleted once its entry in socks carries the owner.
 * socks is keyed by the socket's address, which userspace cannot know.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct tt_owner);
} adopted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tt_owner_seen);
} owner_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Forces bpf2go to emit the Go type for the event and the enums. */
const struct tt_tcp_event *unused_event __attribute__((unused));
const enum tt_tcp_kind *unused_kind __attribute__((unused));
const enum tt_stat *unused_stat __attribute__((unused));
const struct tt_go_pid *unused_go_pid __attribute__((unused));
const struct tt_listen_key *unused_listen_key __attribute__((unused));
const struct tt_owner *unused_owner __attribute__((unused));

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		*v += 1;
}

static __always_inline bool is_tcp(const struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != TT_AF_INET && family != TT_AF_INET6)
		return false;
	if (BPF_CORE_READ_BITFIELD_PROBED(sk, sk_type) != TT_SOCK_STREAM)
		return false;
	return BPF_CORE_READ_BITFIELD_PROBED(sk, sk_protocol) == TT_IPPROTO_TCP;
}

/* Only full sockets carry tcp_sock fields; request and timewait socks share sock_common only. */
static __always_inline bool is_full(__u8 state)
{
	return state != TT_TCP_TIME_WAIT && state != TT_TCP_NEW_SYN_RECV;
}

static __always_inline __u64 sock_id(const struct sock *sk, bool btf)
{
	if (btf)
		return bpf_get_socket_cookie((void *)sk);
	__u64 c = BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
	/* No cookie generated yet and raw_tp cannot make one: the address, marked. */
	return c ? c : ((__u64)sk | (1ULL << 63));
}

/*
 * The entry of the socket at sk. Entries are keyed by the socket's address
 * and deleted in tcp_destroy_sock; one left behind by a freed socket (a
 * missed destroy) would hand its cookie, owner and addresses to the next
 * socket allocated there: in a cluster, a client's new connection carried
 * the cookie of an earlier one to the API server, its SYN retries were
 * reported on that socket and its own bound cookie showed no events at all
 * (read as healthy). Where the cookie can be read, an entry whose id is
 * another socket's is such a leftover: started afresh, and counted. An id
 * made from the address (no cookie then) is the same socket's.
 */
static __always_inline struct tt_sock *sock_get(const struct sock *sk, bool btf, bool create)
{
	__u64 key = (__u64)sk;
	struct tt_sock *s = bpf_map_lookup_elem(&socks, &key);
	if (s && !(s->id >> 63)) {
		__u64 id = btf ? bpf_get_socket_cookie((void *)sk) : BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
		if (id && id != s->id) {
			stat_inc(TT_STAT_SOCKS_STALE);
			struct tt_sock fresh = {};
			fresh.id = id;
			*s = fresh;
		}
	}
	if (s || !create)
		return s;
	struct tt_sock init = {};
	init.id = sock_id(sk, btf);
	long err = bpf_map_update_elem(&socks, &key, &init, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: raced with another CPU */) {
		stat_inc(TT_STAT_SOCKS_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&socks, &key);
}

/*
 * An activity event says which socket the owner (and, for Go processes,
 * which goroutine) did I/O on: what binds a request to its connection
 * without a uprobe. Emitted at most once per interval per socket, and at
 * once when another goroutine takes over the socket. Go keeps the current
 * g in a register (R14 on amd64, X28 on arm64): the syscall's saved user
 * registers hold it. Runtime-internal I/O runs on g0 (goid 0).
 */
static __always_inline void maybe_activity(const struct sock *sk, struct tt_owner_seen *seen,
					   __u32 tgid, __u8 dir)
{
	if (!activity_interval_ns)
		return;
	/* On every send and receive of a traced process: the g register is
	 * read directly (bpf_task_pt_regs gives a typed pointer), the
	 * goroutine id from user memory. Goroutines are compared by id, not by
	 * g pointer: an exited goroutine's g struct is reused for a new one,
	 * which is exactly a takeover to report (a test covers it). */
	__u64 goid = 0, g = 0;
	const struct tt_go_pid *gp = NULL;
	__u32 zero = 0;
	const __u64 *ep = bpf_map_lookup_elem(&act_epoch, &zero);
	__u32 epoch = ep ? (__u32)*ep : 0;
	const __u32 *n = bpf_map_lookup_elem(&go_pids_n, &zero);
	if (n && *n)
		gp = bpf_map_lookup_elem(&go_pids, &tgid);
	if (gp) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
#if defined(__TARGET_ARCH_x86)
		g = regs->r14;
#elif defined(__TARGET_ARCH_arm64)
		g = regs->regs[28];
#endif
		/* A receive by the g a slot names, already reported in its
		 * interval: done without reading user memory (the read is
		 * half of this program's cost). A recycled g (a new goroutine
		 * in an exited one's struct) that only receives is then named
		 * at the slot's next interval; sends always read the id, so a
		 * pooled connection taken over by a new request goroutine in a
		 * recycled g is named at once (drivers do exactly that). */
		if (dir == TT_DIR_RECV && g) {
			for (int i = 0; i < 2; i++) {
				const struct tt_act_slot *o = &seen->slot[i];
				if (o->last_ns && o->g == g && (o->dirs & TT_DIR_RECV) && o->epoch == epoch)
					return;
			}
		}
		if (g)
			bpf_probe_read_user(&goid, sizeof(goid), (const void *)(g + gp->goid_off));
	}
	/* Emit when a goroutine not in the two slots shows up (a takeover:
	 * it replaces the slot used longest ago), when a slot's epoch is
	 * over, or when it does I/O in a direction not reported yet in the
	 * epoch (at most one send and one receive sample per goroutine per
	 * epoch). */
	struct tt_act_slot *sl;
	if (seen->slot[0].last_ns && seen->slot[0].goid == goid)
		sl = &seen->slot[0];
	else if (seen->slot[1].last_ns && seen->slot[1].goid == goid)
		sl = &seen->slot[1];
	else
		sl = NULL;
	if (sl && sl->epoch == epoch) {
		if (sl->dirs & dir)
			return;
		sl->dirs |= dir;
	} else {
		if (!sl)
			sl = seen->slot[0].last_ns <= seen->slot[1].last_ns ? &seen->slot[0] : &seen->slot[1];
		sl->goid = goid;
		sl->epoch = epoch;
		sl->dirs = dir;
	}
	__u64 now = bpf_ktime_get_ns();
	sl->last_ns = now;
	sl->g = g;
	struct tt_sock *s = sock_get(sk, true, false);
	if (!s)
		return;
	struct tt_tcp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(TT_STAT_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = now;
	e->kind = TT_KIND_ACTIVITY;
	e->state = sk->__sk_common.skc_state;
	e->old_state = e->state;
	e->family = sk->__sk_common.skc_family;
	e->sport = s->sport;
	e->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	if (e->family == TT_AF_INET6) {
		BPF_CORE_READ_INTO(&e->saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&e->daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		*(__u32 *)e->saddr = sk->__sk_common.skc_rcv_saddr;
		*(__u32 *)e->daddr = sk->__sk_common.skc_daddr;
	}
	e->cookie = s->id;
	e->pid = s->tgid;
	e->cgroup_id = s->cgroup_id;
	e->netns = s->netns;
	__builtin_memcpy(e->comm, s->comm, sizeof(e->comm));
	e->goid = goid;
	e->dir = dir;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	stat_inc(TT_STAT_EMITTED);
}

static __always_inline bool rate_ok(struct tt_sock *s)
{
	__u64 now = bpf_ktime_get_ns();
	if (now - s->window_start > rate_window_ns) {
		s->window_start = now;
		s->window_count = 0;
	}
	if (s->window_count >= rate_burst) {
		s->suppressed++;
		stat_inc(TT_STAT_RATE_LIMITED);
		return false;
	}
	s->window_count++;
	return true;
}

static __always_inline void fill_addrs(struct tt_tcp_event *e, const struct sock *sk)
{
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (e->family == TT_AF_INET6) {
		BPF_CORE_READ_INTO(&e->saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&e->daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		BPF_CORE_READ_INTO((__u32 *)e->saddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)e->daddr, sk, __sk_common.skc_daddr);
	}
}

static __always_inline void fill_tcp(struct tt_tcp_event *e, const struct sock *sk)
{
	const struct inet_connection_sock *icsk = (const void *)sk;
	const struct tcp_sock *tp = (const void *)sk;

	e->ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	e->pending = BPF_CORE_READ(icsk, icsk_pending);
	e->backoff = BPF_CORE_READ(icsk, icsk_backoff);
	e->retransmits = BPF_CORE_READ(icsk, icsk_retransmits);
	e->rto_jiffies = BPF_CORE_READ(icsk, icsk_rto);
	e->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	e->rttvar_us = BPF_CORE_READ(tp, mdev_us) >> 2;
	e->snd_cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e->retrans_out = BPF_CORE_READ(tp, retrans_out);
	e->lost_out = BPF_CORE_READ(tp, lost_out);
	e->total_retrans = BPF_CORE_READ(tp, total_retrans);
	e->snd_wnd = BPF_CORE_READ(tp, snd_wnd);
}

/*
 * emit writes one event. sk may be a request sock (SYN-ACK retransmits): then
 * only sock_common is read. owner names the socket whose owner to report.
 */
static __always_inline void emit(const struct sock *sk, struct tt_sock *owner, __u8 kind,
				 __u8 state, __u8 old_state, int err, bool full)
{
	struct tt_tcp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(TT_STAT_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->state = state;
	e->old_state = old_state;
	e->err = err;
	fill_addrs(e, sk);
	if (full)
		fill_tcp(e, sk);
	if (owner) {
		e->cookie = owner->id;
		e->pid = owner->tgid;
		e->cgroup_id = owner->cgroup_id;
		e->netns = owner->netns;
		__builtin_memcpy(e->comm, owner->comm, sizeof(e->comm));
		e->suppressed = owner->suppressed;
		owner->suppressed = 0;
		if (!e->sport)
			e->sport = owner->sport;
		else if (!owner->sport && full)
			owner->sport = e->sport;
	}
	if (!e->netns)
		e->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);

	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	stat_inc(TT_STAT_EMITTED);
}

/*
 * The owner's send or receive on a socket with a retransmit pending (see
 * tt_owner_seen): one event once everything sent before that retransmit is
 * acknowledged. snd_una has moved past the retransmit's own snd_una too, so
 * a retransmit sent with nothing outstanding (snd_nxt rewound) is not taken
 * for acknowledged. The time is an upper bound: the ACK came before it.
 */
static __always_inline void check_retx_acked(const struct sock *sk, struct tt_owner_seen *seen)
{
	const struct tcp_sock *tp = (const void *)sk;
	__u32 una = BPF_CORE_READ(tp, snd_una);
	if ((__s32)(una - seen->retx_nxt) < 0 || una == seen->retx_una)
		return;
	seen->retx_pending = 0;
	struct tt_sock *s = sock_get(sk, true, false);
	if (!s)
		return;
	__u8 state = sk->__sk_common.skc_state;
	emit(sk, s, TT_KIND_RETRANSMIT_ACKED, state, state, 0, true);
}

/*
 * Runs in the owner's process context on every send and receive of every
 * socket on the node: the hottest code here. With typed pointers (tp_btf) it
 * reads fields directly, no probe-read helper calls, and returns after one
 * hash lookup when the socket's owner is already known.
 */
static __always_inline void note_owner(const struct sock *sk, bool btf, __u8 dir)
{
	stat_inc(TT_STAT_OWNER_HITS);
	if (!sk)
		return;
	const struct sock *tsk = sk; /* the TCP socket whose owner to record */
	bool typed = btf;
	if (btf) {
		__u16 family = sk->__sk_common.skc_family;
		if (family != TT_AF_INET && family != TT_AF_INET6)
			return;
		if (BPF_CORE_READ_BITFIELD(sk, sk_type) != TT_SOCK_STREAM)
			return;
		__u16 proto = BPF_CORE_READ_BITFIELD(sk, sk_protocol);
		if (proto == TT_IPPROTO_MPTCP) {
			/* The process talks to the MPTCP socket; retransmits
			 * happen on its TCP subflow (Go listeners use MPTCP by
			 * default since 1.24). Record the first subflow. */
			tsk = BPF_CORE_READ((const struct mptcp_sock___tt *)sk, first);
			if (!tsk)
				return;
			typed = false;
		} else if (proto != TT_IPPROTO_TCP) {
			return;
		}
	} else if (!is_tcp(sk)) {
		return;
	}
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (target_tgid && tgid != target_tgid)
		return;
	struct tt_owner_seen *seen = NULL;
	if (btf) {
		seen = bpf_sk_storage_get(&owner_seen, (void *)sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (seen && seen->retx_pending && typed)
			check_retx_acked(sk, seen);
		if (seen && seen->tgid == tgid && seen->sport) {
			if (typed && dir)
				maybe_activity(sk, seen, tgid, dir);
			return;
		}
	}
	struct tt_sock *s;
	__u16 sport;
	if (typed) {
		s = sock_get(tsk, true, true);
		sport = tsk->__sk_common.skc_num;
	} else {
		s = sock_get(tsk, false, true);
		sport = BPF_CORE_READ(tsk, __sk_common.skc_num);
	}
	if (!s)
		return;
	if (!s->sport)
		s->sport = sport;
	/* A cgroup id of 0 comes from an adopted listener whose cgroup could
	 * not be read: the first send in the owner's context fills it. */
	if (s->tgid != tgid || !s->cgroup_id) {
		s->tgid = tgid;
		s->cgroup_id = bpf_get_current_cgroup_id();
		s->netns = BPF_CORE_READ(tsk, __sk_common.skc_net.net, ns.inum);
		bpf_get_current_comm(&s->comm, sizeof(s->comm));
	}
	if (seen) {
		seen->tgid = tgid;
		seen->sport = s->sport;
		if (typed && dir)
			maybe_activity(sk, seen, tgid, dir);
	}
}

/*
 * The socket's entry for an event hook, or NULL when the event is filtered
 * out. With a target process only sockets it is known to own pass.
 */
static __always_inline struct tt_sock *event_sock(const struct sock *sk, bool btf, bool *pass)
{
	struct tt_sock *s = sock_get(sk, btf, target_tgid == 0);
	if (!s || !s->tgid) {
		/* A socket older than the collector, adopted by userspace for
		 * its process: it may never run a hook in that process's
		 * context again (a connect in SYN retries, data in RTO backoff). */
		__u64 id = s ? s->id : sock_id(sk, btf);
		struct tt_owner *o = bpf_map_lookup_elem(&adopted, &id);
		if (o) {
			if (!s)
				s = sock_get(sk, btf, true);
			if (s) {
				s->tgid = o->tgid;
				s->cgroup_id = o->cgroup_id;
				__builtin_memcpy(s->comm, o->comm, sizeof(s->comm));
				bpf_map_delete_elem(&adopted, &id);
			}
		}
	}
	*pass = !target_tgid || (s && s->tgid == target_tgid);
	return s;
}

static __always_inline int on_retransmit(unsigned long long *ctx, const struct sock *sk, bool btf)
{
	if (!sk)
		return 0;
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	if (!is_full(state))
		return 0;
	bool pass;
	struct tt_sock *s = event_sock(sk, btf, &pass);
	if (!pass)
		return 0;

	const struct inet_connection_sock *icsk = (const void *)sk;
	__u8 ca = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	__u8 pending = BPF_CORE_READ(icsk, icsk_pending);
	__u8 kind;
	/* SYN retries enter Loss too: classify by state first. */
	if (state == TT_TCP_SYN_SENT)
		kind = TT_KIND_SYN_RETRANSMIT;
	else if (ca == TCP_CA_Loss)
		kind = TT_KIND_RTO;
	else if (ca == TCP_CA_Recovery)
		kind = TT_KIND_FAST_RETRANSMIT;
	else if (pending == TT_ICSK_TIME_LOSS_PROBE)
		kind = TT_KIND_TLP;
	else
		kind = TT_KIND_RETRANSMIT;

	if (btf && kind != TT_KIND_SYN_RETRANSMIT) {
		/* Before the rate limit: a suppressed retransmit is still one
		 * whose data an acknowledgement must cover. No create: a socket
		 * its owner never sent on has no storage, and no send or
		 * receive that would check it. */
		struct tt_owner_seen *seen = bpf_sk_storage_get(&owner_seen, (void *)sk, 0, 0);
		if (seen) {
			const struct tcp_sock *tp = (const void *)sk;
			seen->retx_una = BPF_CORE_READ(tp, snd_una);
			seen->retx_nxt = BPF_CORE_READ(tp, snd_nxt);
			seen->retx_pending = 1;
		}
	}
	if (s && !rate_ok(s))
		return 0;
	int err = 0;
	if (has_retransmit_err)
		err = (int)ctx[2];
	emit(sk, s, kind, state, state, err, true);
	return 0;
}

static __always_inline struct tt_listen_key listen_key(const struct sock *sk)
{
	struct tt_listen_key k = {};
	k.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	k.port = BPF_CORE_READ(sk, __sk_common.skc_num);
	return k;
}

/* listen() ran (owner recorded by note_owner): remember the port's owner. */
static __always_inline void remember_listener(const struct sock *sk, bool btf)
{
	struct tt_sock *s = sock_get(sk, btf, false);
	if (!s || !s->tgid)
		return;
	struct tt_listen_key k = listen_key(sk);
	struct tt_owner o = {};
	o.cgroup_id = s->cgroup_id;
	o.tgid = s->tgid;
	__builtin_memcpy(o.comm, s->comm, sizeof(o.comm));
	bpf_map_update_elem(&listeners, &k, &o, BPF_ANY);
}

/* A listener closed: forget its port, unless another process took it
 * over. An adopted listener (older than the collector) has no socks entry:
 * its closer, in process context, is taken for its owner. */
static __always_inline void forget_listener(const struct sock *sk, bool btf)
{
	struct tt_sock *s = sock_get(sk, btf, false);
	__u32 tgid = s ? s->tgid : (__u32)(bpf_get_current_pid_tgid() >> 32);
	struct tt_listen_key k = listen_key(sk);
	const struct tt_owner *o = bpf_map_lookup_elem(&listeners, &k);
	if (o && o->tgid == tgid)
		bpf_map_delete_elem(&listeners, &k);
}

/* A passive open completed: the accepted socket's owner is its listener's. */
static __always_inline void inherit_owner(const struct sock *sk, bool btf)
{
	struct tt_listen_key k = listen_key(sk);
	const struct tt_owner *o = bpf_map_lookup_elem(&listeners, &k);
	if (!o || (target_tgid && o->tgid != target_tgid))
		return;
	struct tt_sock *s = sock_get(sk, btf, true);
	if (!s || s->tgid)
		return;
	s->tgid = o->tgid;
	s->cgroup_id = o->cgroup_id;
	s->netns = k.netns;
	s->sport = k.port;
	__builtin_memcpy(s->comm, o->comm, sizeof(s->comm));
}

static __always_inline int on_state(const struct sock *sk, int old, int new, bool btf)
{
	if (!sk || !is_tcp(sk))
		return 0;
	/* connect() and listen() run in the owner's context. */
	if ((old == TT_TCP_CLOSE && new == TT_TCP_SYN_SENT) || new == TT_TCP_LISTEN)
		note_owner(sk, btf, 0);
	/* (A child socket is cloned from its listener: its first transition
	 * is LISTEN -> SYN_RECV, in softirq. Not a listener closing.) */
	if (new == TT_TCP_LISTEN)
		remember_listener(sk, btf);
	else if (old == TT_TCP_LISTEN && new == TT_TCP_CLOSE)
		forget_listener(sk, btf);
	else if (old == TT_TCP_SYN_RECV && new == TT_TCP_ESTABLISHED)
		inherit_owner(sk, btf);

	__u8 kind = 0;
	int err = 0;
	if (old == TT_TCP_SYN_SENT && new == TT_TCP_CLOSE) {
		err = BPF_CORE_READ(sk, sk_err);
		kind = err ? TT_KIND_CONNECT_FAILED : TT_KIND_CONNECT_ABORTED;
	} else if (emit_lifecycle) {
		if (old == TT_TCP_CLOSE && new == TT_TCP_SYN_SENT)
			kind = TT_KIND_CONNECT;
		else if (new == TT_TCP_ESTABLISHED)
			kind = TT_KIND_ESTABLISHED;
		else if (new == TT_TCP_CLOSE && old != TT_TCP_LISTEN)
			kind = TT_KIND_CLOSE;
		else if ((old == TT_TCP_ESTABLISHED && new == TT_TCP_FIN_WAIT1) ||
			 (old == TT_TCP_CLOSE_WAIT && new == TT_TCP_LAST_ACK))
			kind = TT_KIND_CLOSING;
	}
	if (!kind)
		return 0;
	bool pass;
	struct tt_sock *s = event_sock(sk, btf, &pass);
	if (!pass)
		return 0;
	emit(sk, s, kind, new, old, err, true);
	return 0;
}

static __always_inline int on_error(const struct sock *sk, bool btf)
{
	if (!sk || !is_tcp(sk))
		return 0;
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	/* A failed connect is reported once, by its SYN_SENT -> CLOSE. */
	if (state == TT_TCP_SYN_SENT || !is_full(state))
		return 0;
	bool pass;
	struct tt_sock *s = event_sock(sk, btf, &pass);
	if (!pass)
		return 0;
	emit(sk, s, TT_KIND_SOCKET_ERROR, state, state, BPF_CORE_READ(sk, sk_err), true);
	return 0;
}

static __always_inline int on_reset(const struct sock *sk, __u8 kind, bool btf)
{
	/* tcp_send_reset may have no socket (a RST for a port nobody owns). */
	if (!sk)
		return 0;
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	bool full = is_full(state);
	bool pass = !target_tgid;
	struct tt_sock *s = NULL;
	if (full)
		s = event_sock(sk, btf, &pass);
	if (!pass)
		return 0;
	emit(sk, s, kind, state, state, 0, full);
	return 0;
}

static __always_inline int on_synack(const struct sock *listener, const void *req, bool btf)
{
	if (!listener || !req)
		return 0;
	bool pass;
	struct tt_sock *s = event_sock(listener, btf, &pass);
	if (!pass)
		return 0;
	if (s && !rate_ok(s))
		return 0;
	/* A request sock starts with sock_common: its addresses are the connection's. */
	emit((const struct sock *)req, s, TT_KIND_SYNACK_RETRANSMIT, TT_TCP_SYN_RECV, TT_TCP_LISTEN, 0, false);
	return 0;
}

/*
 * The retransmission timer fired with the zero-window probe armed. The timer
 * arrives as a number (copied out of ctx): the verifier refuses the
 * container_of arithmetic on a typed pointer, and every read here is a probe
 * read anyway.
 */
static __always_inline int on_timer(unsigned long long *ctx)
{
	__u64 addr;
	if (!tcp_write_timer_addr || bpf_probe_read_kernel(&addr, sizeof(addr), ctx) || !addr)
		return 0;
	const struct timer_list *timer = (const void *)addr;
	if ((__u64)BPF_CORE_READ(timer, function) != tcp_write_timer_addr)
		return 0;
	addr -= bpf_core_field_offset(struct inet_connection_sock, icsk_retransmit_timer);
	const struct sock *sk = (const void *)addr;
	const struct inet_connection_sock *icsk = (const void *)sk;
	if (BPF_CORE_READ(icsk, icsk_pending) != TT_ICSK_TIME_PROBE0)
		return 0;
	bool pass;
	/* Not a typed pointer here: no cookie helper, the entry holds the id. */
	struct tt_sock *s = event_sock(sk, false, &pass);
	if (!pass)
		return 0;
	if (s && !rate_ok(s))
		return 0;
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	emit(sk, s, TT_KIND_ZERO_WINDOW, state, state, 0, true);
	return 0;
}

static __always_inline int on_destroy(const struct sock *sk)
{
	__u64 key = (__u64)sk;
	bpf_map_delete_elem(&socks, &key);
	return 0;
}

/* tp_btf programs: typed arguments, socket cookies. */

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(btf_retransmit_skb, const struct sock *sk)
{
	return on_retransmit(ctx, sk, true);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(btf_inet_sock_set_state, const struct sock *sk, int old, int new)
{
	return on_state(sk, old, new, true);
}

SEC("tp_btf/inet_sk_error_report")
int BPF_PROG(btf_inet_sk_error_report, const struct sock *sk)
{
	return on_error(sk, true);
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(btf_tcp_receive_reset, const struct sock *sk)
{
	return on_reset(sk, TT_KIND_RESET_RECEIVED, true);
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(btf_tcp_send_reset, const struct sock *sk)
{
	return on_reset(sk, TT_KIND_RESET_SENT, true);
}

SEC("tp_btf/tcp_retransmit_synack")
int BPF_PROG(btf_tcp_retransmit_synack, const struct sock *sk, const struct request_sock *req)
{
	return on_synack(sk, req, true);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(btf_sock_send_length, const struct sock *sk)
{
	note_owner(sk, true, TT_DIR_SEND);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(btf_sock_recv_length, const struct sock *sk, int ret)
{
	/* A failed receive (EAGAIN before every parked read in Go) is followed
	 * by one that succeeds: skip it. */
	if (ret <= 0)
		return 0;
	note_owner(sk, true, TT_DIR_RECV);
	return 0;
}

SEC("tp_btf/timer_expire_entry")
int BPF_PROG(btf_timer_expire_entry)
{
	return on_timer(ctx);
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(btf_tcp_destroy_sock, const struct sock *sk)
{
	return on_destroy(sk);
}

/* raw_tp twins: the same bodies, untyped arguments read through probe reads. */

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(raw_retransmit_skb, const struct sock *sk)
{
	return on_retransmit(ctx, sk, false);
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(raw_inet_sock_set_state, const struct sock *sk, int old, int new)
{
	return on_state(sk, old, new, false);
}

SEC("raw_tp/inet_sk_error_report")
int BPF_PROG(raw_inet_sk_error_report, const struct sock *sk)
{
	return on_error(sk, false);
}

SEC("raw_tp/tcp_receive_reset")
int BPF_PROG(raw_tcp_receive_reset, const struct sock *sk)
{
	return on_reset(sk, TT_KIND_RESET_RECEIVED, false);
}

SEC("raw_tp/tcp_send_reset")
int BPF_PROG(raw_tcp_send_reset, const struct sock *sk)
{
	return on_reset(sk, TT_KIND_RESET_SENT, false);
}

SEC("raw_tp/tcp_retransmit_synack")
int BPF_PROG(raw_tcp_retransmit_synack, const struct sock *sk, const struct request_sock *req)
{
	return on_synack(sk, req, false);
}

SEC("raw_tp/sock_send_length")
int BPF_PROG(raw_sock_send_length, const struct sock *sk)
{
	note_owner(sk, false, 0);
	return 0;
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(raw_sock_recv_length, const struct sock *sk, int ret)
{
	if (ret <= 0)
		return 0;
	note_owner(sk, false, 0);
	return 0;
}

/* Before 6.3 there is no sock_recv_length: receives are seen here, in recvmsg. */
SEC("raw_tp/tcp_rcv_space_adjust")
int BPF_PROG(raw_tcp_rcv_space_adjust, const struct sock *sk)
{
	note_owner(sk, false, 0);
	return 0;
}

SEC("tp_btf/tcp_rcv_space_adjust")
int BPF_PROG(btf_tcp_rcv_space_adjust, const struct sock *sk)
{
	note_owner(sk, true, TT_DIR_RECV);
	return 0;
}

SEC("raw_tp/timer_expire_entry")
int BPF_PROG(raw_timer_expire_entry)
{
	return on_timer(ctx);
}

SEC("raw_tp/tcp_destroy_sock")
int BPF_PROG(raw_tcp_destroy_sock, const struct sock *sk)
{
	return on_destroy(sk);
}
