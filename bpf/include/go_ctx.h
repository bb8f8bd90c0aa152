/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Reading a traced Go process: its memory, goroutine IDs, OpenTelemetry
 * spans, and the walk up a context chain that the deadline, call, dial and
 * gRPC probes all make. Include after go_maps.h.
 */
#ifndef TT_GO_CTX_H
#define TT_GO_CTX_H

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

/*
 * read_span copies the IDs of the span a valueCtx holds under OpenTelemetry's
 * current-span key. 1: read; 0: not a span; -1: a span whose layout is
 * unknown (the caller stops rather than report an ancestor's span).
 */
static __always_inline int read_span(__u64 data, __u32 tgid, const struct tt_go_offsets *off,
				     struct span_ids *ids)
{
	if (off->span_key_type && read_u64(data + off->valuectx_key) != off->span_key_type)
		return 0;
	struct pid_ptr tkey = {.pid = tgid, .ptr = read_u64(data + off->valuectx_val)};
	const struct tt_go_span_type *st = bpf_map_lookup_elem(&go_span_types, &tkey);
	if (!st)
		return 0;
	if (st->sc_off == TT_GO_SPAN_UNKNOWN)
		return -1;
	__u64 sc = read_u64(data + off->valuectx_val + 8) + st->sc_off;
	bpf_probe_read_user(ids->trace_id, sizeof(ids->trace_id), (const void *)(sc + off->sc_trace_id));
	bpf_probe_read_user(ids->span_id, sizeof(ids->span_id), (const void *)(sc + off->sc_span_id));
	bpf_probe_read_user(&ids->flags, 1, (const void *)(sc + off->sc_flags));
	if (st->start_off) {
		__u64 start = read_u64(data + off->valuectx_val + 8) + st->start_off - 1;
		ids->start_wall = read_u64(start);
		ids->start_ext = (__s64)read_u64(start + 8);
	}
	return 1;
}

#define TT_GO_CHAIN 24

/* Why a walk up a context chain ended. */
enum ctx_end {
	CTX_END_DEPTH = 0, /* TT_GO_CHAIN contexts were stepped through */
	CTX_END_ROOT,      /* a nil context, or a root one (Background, TODO) */
	CTX_END_UNKNOWN,   /* a context type userspace did not register (its itab: tab) */
};

/*
 * A walk up a context chain. A context.Context is an interface: an itab
 * and a data word. Only the context types userspace identified for the
 * process (by itab, in go_ctx_itabs) are stepped through, to the parent
 * each embeds; anything else ends the walk, never a guess.
 */
struct ctx_walk {
	__u64 tab, data;                 /* the current context */
	const struct tt_go_ctx_itab *it; /* its type, once stepped into */
	__u32 tgid;
	__u32 depth; /* contexts stepped into; the walk stops at TT_GO_CHAIN */
	enum ctx_end end;
};

/* ctx_walk starts a walk at context (tab, data) of process tgid. */
static __always_inline struct ctx_walk ctx_walk(__u32 tgid, __u64 tab, __u64 data)
{
	struct ctx_walk w = {.tab = tab, .data = data, .tgid = tgid};
	return w;
}

/*
 * ctx_next steps into the walk's next context: the first one, then each
 * parent. 1: w->tab, w->data and w->it are that context; 0: the walk has
 * ended, and w->end says why (on CTX_END_UNKNOWN, w->tab is the unknown
 * type's itab).
 *
 *	struct ctx_walk w = ctx_walk(tgid, tab, data);
 *	while (ctx_next(&w)) {
 *		if (w.it->is_timer) ...
 *	}
 */
static __always_inline int ctx_next(struct ctx_walk *w)
{
	if (w->depth >= TT_GO_CHAIN)
		return 0;
	if (w->it) {
		__u64 next = w->data + w->it->parent_off;
		w->tab = read_u64(next);
		w->data = read_u64(next + 8);
	}
	if (!w->tab || !w->data) {
		w->end = CTX_END_ROOT;
		return 0;
	}
	struct pid_ptr key = {.pid = w->tgid, .ptr = w->tab};
	w->it = bpf_map_lookup_elem(&go_ctx_itabs, &key);
	if (!w->it) {
		w->end = CTX_END_UNKNOWN;
		return 0;
	}
	if (w->it->parent_off == TT_GO_ROOT_CTX) {
		w->end = CTX_END_ROOT;
		return 0;
	}
	w->depth++;
	return 1;
}

#endif /* TT_GO_CTX_H */
