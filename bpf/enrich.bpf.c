// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Optional enrichment: what tracepoints cannot tell on every kernel, from
 * kernel functions, loaded only where the kernel allows it and never
 * required. The tracer works without it (the development machines have no
 * kprobes and refuse fentry).
 *
 * tcp_send_loss_probe: the kernel sends a tail loss probe. The tracepoint
 * side classifies a retransmit as a TLP by the armed timer (icsk_pending)
 * and the CA state, which is an inference; this hook is the fact, one event
 * per probe sent (a probe may send new data, so no retransmit follows),
 * on kernels before tcp_cong_state_set existed too.
 *
 * fentry is preferred (typed argument, socket cookie); kprobe is the
 * fallback (cookie 0: the 4-tuple identifies the socket). Both share one
 * body. Events use the TCP collector's record layout (struct tt_tcp_event)
 * with kind TT_KIND_TLP; owner fields stay 0: ownership lives in the TCP
 * collector's tables.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "tcp_event.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TT_AF_INET6 10

enum tt_enrich_stat {
	TT_ENRICH_HITS = 0,    /* hook runs */
	TT_ENRICH_EMITTED = 1, /* events written */
	TT_ENRICH_LOST = 2,    /* events dropped: ring buffer full */
	TT_ENRICH_STAT_MAX = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} enrich_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_ENRICH_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} enrich_stats SEC(".maps");

const enum tt_enrich_stat *unused_enrich_stat __attribute__((unused));

static __always_inline void enrich_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&enrich_stats, &idx);
	if (v)
		*v += 1;
}

static __always_inline int on_loss_probe(struct sock *sk, bool btf)
{
	enrich_inc(TT_ENRICH_HITS);
	struct tt_tcp_event *e = bpf_ringbuf_reserve(&enrich_events, sizeof(*e), 0);
	if (!e) {
		enrich_inc(TT_ENRICH_LOST);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	const struct inet_connection_sock *icsk = (const void *)sk;
	const struct tcp_sock *tp = (const void *)sk;

	e->ts_ns = bpf_ktime_get_ns();
	e->kind = TT_KIND_TLP;
	if (btf)
		e->cookie = bpf_get_socket_cookie(sk);
	e->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
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
	e->state = BPF_CORE_READ(sk, __sk_common.skc_state);
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
	bpf_ringbuf_submit(e, 0);
	enrich_inc(TT_ENRICH_EMITTED);
	return 0;
}

SEC("fentry/tcp_send_loss_probe")
int BPF_PROG(fentry_loss_probe, struct sock *sk)
{
	return on_loss_probe(sk, true);
}

SEC("kprobe/tcp_send_loss_probe")
int BPF_KPROBE(kprobe_loss_probe, struct sock *sk)
{
	return on_loss_probe(sk, false);
}
