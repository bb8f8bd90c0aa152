/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Go deadline events shared between bpf/godeadline.bpf.c and collector/. */
#ifndef TT_GO_EVENT_H
#define TT_GO_EVENT_H

/* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define TT_TRACEPARENT_LEN 56

/* Where an expiry was seen. Numbers are part of the record format: only append. */
enum tt_go_expiry {
	TT_GO_TIMER_FIRED = 1,      /* the deadline's timer fired */
	TT_GO_EXPIRED_AT_CREATION = 2, /* WithDeadline was given a deadline already in the past */
	TT_GO_TIMER_FIRED_CANCELLED = 3, /* the timer fired after the program cancelled the context (it saw the deadline first, e.g. as a socket deadline) */
	TT_GO_CLIENT_TIMER = 4,     /* net/http's own Client.Timeout timer fired (doCancel) before the context's did */
	TT_GO_SERVER_TIMER = 5,     /* grpc-go's server deadline timer fired (closeStream) before the stream context's did */
	TT_GO_DIAL_TIMER = 6,       /* a dial's socket write deadline (set by net's connect from the context's) fired before the context's timer did */
};

/* Where a budget read at the expiry comes from (tt_go_event.budget_src).
 * Numbers are part of the record format: only append. */
enum tt_go_budget_src {
	TT_BUDGET_NONE = 0,
	TT_BUDGET_CLIENT_TIMEOUT = 1,  /* net/http's (*Client).send: Client.Timeout */
	TT_BUDGET_TIMEOUT_HANDLER = 2, /* net/http's (*timeoutHandler).ServeHTTP: http.TimeoutHandler's duration */
	TT_BUDGET_DIALER_TIMEOUT = 3,  /* net's (*Dialer).DialContext: Dialer.Timeout */
};
#define TT_BUDGET_FRAMES 3
/* Frames read past a waiter's TT_GO_WAIT_STACK for a budget frame only
 * (net's DialContext lies 14-15 frames above a dial parked in connect). */
#define TT_BUDGET_EXTRA_FRAMES 8
/* Frames read past a waiter's TT_GO_WAIT_STACK for a waiting frame, for
 * the goroutines not parked on the context (deep_frame): a net/http
 * handler reading its request body over TLS parks 14 frames below
 * connReader.Read. */
#define TT_DEEP_FRAMES 8
/* Open-coded defer slots of DialContext looked at (Go 1.21-1.25 have two
 * defers there, 1.26 one). */
#define TT_DIAL_DEFERS 2

/* tt_go_offsets.has_children: how a cancelCtx's children map is laid out. */
enum tt_go_children_map {
	TT_CHILDREN_SWISS = 1, /* internal/runtime/maps.Map (Go 1.24+) */
	TT_CHILDREN_HMAP = 2,  /* runtime.hmap (before) */
};

/* Struct field offsets in the traced binary, resolved in userspace (DWARF, else a table by Go version). */
struct tt_go_offsets {
	__u32 timerctx_deadline;   /* context.timerCtx.deadline (a time.Time: wall, ext, loc) */
	__u32 cancelctx_err;       /* context.cancelCtx.err (atomic.Value: type word first) */
	__u32 cancelctx_children;  /* context.cancelCtx.children (map pointer; the map's first word is its length) */
	__u32 g_goid;              /* runtime.g.goid */
	__u32 timerctx_parent;     /* context.timerCtx.cancelCtx.Context: the parent interface */
	__u32 valuectx_val;        /* context.valueCtx.val (an any: type word, data word) */
	__u32 sc_trace_id;         /* trace.SpanContext.traceID */
	__u32 sc_span_id;          /* trace.SpanContext.spanID */
	__u32 sc_flags;            /* trace.SpanContext.traceFlags */
	__u32 has_otel;            /* the binary links OpenTelemetry: walk the chain for a span */
	__u32 valuectx_key;        /* context.valueCtx.key (an any) */
	__u64 span_key_type;       /* type descriptor of OTel's current-span key type (runtime address), 0: unknown */
	__u64 tcpconn_itab;        /* itab of *net.TCPConn as a net.Conn (runtime address), 0: unknown */
	__u32 persistconn_conn;    /* net/http.persistConn.conn (a net.Conn) */
	__u32 conn_fd;             /* net.conn.fd (*netFD) */
	__u32 netfd_sysfd;         /* net.netFD.pfd + internal/poll.FD.Sysfd */
	__u32 request_ctx;         /* net/http.Request.ctx (the transportRequest embeds *Request first) */
	/* net/http.Request.Cancel, where net/http's doCancel (the Client.Timeout
	 * timer of a RoundTripper not its own) is probed; 0: not probed. */
	__u32 request_cancel;
	__u64 deadline_err_type;   /* type descriptor of context.deadlineExceededError (runtime address), 0: unknown: cancelCtx.err as an atomic.Value holds it */
	__u64 deadline_err_itab;   /* its itab as an error (runtime address), 0: unknown: cancelCtx.err as an error (older Go) holds it */
	/* Who waits on an expiring context (0 in has_waiters: not read). */
	__u32 has_waiters;
	__u32 cancelctx_done;      /* context.cancelCtx.done (atomic.Value: data word at +8, the chan) */
	__u32 hchan_recvq_first;   /* runtime.hchan.recvq + runtime.waitq.first (*sudog) */
	__u32 sudog_g;             /* runtime.sudog.g */
	__u32 sudog_next;          /* runtime.sudog.next */
	__u32 g_sched_pc;          /* runtime.g.sched.pc */
	__u32 g_sched_bp;          /* runtime.g.sched.bp (the frame pointer at the park) */
	/* The children map (Go 1.24+ swiss maps: a small map's dirPtr is its
	 * one group, a control word then 8 slots of {canceler, struct{}}, 24
	 * bytes each); 0
	 * in has_children: only the context's own Done is read; TT_CHILDREN_HMAP:
	 * a runtime.hmap (before Go 1.24), map_dirptr its buckets, map_dirlen
	 * its B (one byte). */
	__u32 has_children;
	__u32 map_dirptr;          /* internal/runtime/maps.Map.dirPtr (runtime.hmap.buckets) */
	__u32 map_dirlen;          /* internal/runtime/maps.Map.dirLen (runtime.hmap.B) */
	__u32 g_selectdone;        /* runtime.g.selectDone, 0: unknown */
	/* runtime.g.atomicstatus, 0: unknown (the deadline's creator is not
	 * read at the expiry: a running goroutine's saved stack is stale). */
	__u32 g_atomicstatus;
	/* The HTTP/2 servers: [0] the standard library's (bundled into
	 * net/http; net/http/internal/http2 since Go 1.27), [1]
	 * golang.org/x/net/http2's; 0 in h2_stream_ctx: not probed. The
	 * stream's context (an interface: data word at +8), the HEADERS
	 * frame's decoded fields ([]hpack.HeaderField) and the field's
	 * layout. */
	__u32 h2_stream_ctx[2];
	__u32 h2_meta_fields[2];
	__u32 h2_hf_name[2];
	__u32 h2_hf_value[2];
	__u32 h2_hf_size[2];
	/* Non-zero: runtime.netpollWriteDeadline is probed (go_dial_timer), a
	 * second timer of a dial's deadline: expiries are merged (expiry_marks). */
	__u32 has_dial_timer;
	/* Budget frames (enum tt_go_budget_src - 1): functions [budget_lo,
	 * budget_hi) (runtime addresses; 0: none) that make a deadline from
	 * a duration their receiver holds, budget_recv bytes in, out of the
	 * context of a *http.Request they take budget_req bytes into their
	 * spill slots (tt_go_event.budget_ns). */
	__u64 budget_lo[TT_BUDGET_FRAMES];
	__u64 budget_hi[TT_BUDGET_FRAMES];
	__u32 budget_recv[TT_BUDGET_FRAMES];
	__u32 budget_req[TT_BUDGET_FRAMES];
	/* The dialer's budget frame (TT_BUDGET_DIALER_TIMEOUT - 1, whose
	 * budget_recv is Dialer.Timeout): DialContext's open-coded defers,
	 * bytes from its frame pointer (gobin.OpenDefers): the byte of defer
	 * bits and the first deferred function's slot; and Dialer.Deadline's
	 * offset (its deadline is min(start + Timeout, Deadline)). */
	__s32 dial_defer_bits;
	__s32 dial_defer_slots;
	__u32 dialer_deadline;
	__u32 _pad_dial;
};

/*
 * What lies between an outbound call's net.Conn and its *net.TCPConn, per
 * traced process: the wrappers to look through (crypto/tls.Conn; grpc-go's
 * syscallConn around a tls.Conn) and the HTTP/2 clients' connection field.
 * Absent for a process: plain TCP only, no HTTP/2 round trips.
 */
#define TT_CONN_WRAPPERS 2
#define TT_WAIT_FRAMES 16
/* The first waiting frames, whose argument is an interface of a known
 * type (wait_itab: http.TimeoutHandler's ResponseWriter, HTTP/1's and the
 * HTTP/2 servers'), looked through wrappers (unwrap_iface); the others'
 * is a pointer. */
#define TT_ITAB_FRAMES 3
/* Middleware wrappers looked through to a known interface (unwrap_iface). */
#define TT_IFACE_UNWRAP 4
#define TT_AFTERFUNCS 4
struct tt_go_conn_layout {
	__u64 wrap_itab[TT_CONN_WRAPPERS];  /* a wrapper's itab as a net.Conn (runtime address), 0: none */
	__u32 wrap_inner[TT_CONN_WRAPPERS]; /* the wrapped net.Conn's offset in it */
	/* The HTTP/2 clients: [0] the standard library's (net/http's bundled
	 * http2ClientConn; net/http/internal/http2.ClientConn since Go 1.27),
	 * [1] golang.org/x/net/http2.ClientConn. */
	__u32 h2_tconn[2];   /* the client connection's tconn (a net.Conn) */
	__u32 h2_req_ctx[2]; /* the request's context: http.Request.ctx, or ClientRequest.Context (Go 1.27) */
	/* Waiting frames: functions [wait_lo, wait_hi) (runtime addresses)
	 * whose frame, in the stack of a goroutine parked on an expiring
	 * context, names the connection the goroutine waits on: the
	 * function's first argument (a pointer, read from its register spill
	 * slot in the caller's frame) holds a net.Conn wait_conn bytes in.
	 * net/http's persistConn.roundTrip and readLoop, the HTTP/2 clients'
	 * roundTrip, gRPC's waitOnHeader; with wait_via, the argument holds a pointer wait_via - 1
	 * bytes in, to what holds the net.Conn (gRPC's stream, its
	 * transport), and with wait_via2 that holds a pointer wait_via2 - 1
	 * bytes in, to it (gRPC's server stream, its transport stream, the
	 * transport). wait_lo 0: unused. */
	__u64 wait_lo[TT_WAIT_FRAMES];
	__u64 wait_hi[TT_WAIT_FRAMES];
	__u32 wait_conn[TT_WAIT_FRAMES];
	__u32 wait_via[TT_WAIT_FRAMES];  /* 0: none */
	__u32 wait_via2[TT_WAIT_FRAMES]; /* 0: none */
	/* Non-zero: the first argument is a *net.netFD itself (net's
	 * (*netFD).connect: a dial waiting for its handshake), its
	 * descriptor at the process's netfd_sysfd; wait_conn and the vias
	 * unused. */
	__u32 wait_netfd[TT_WAIT_FRAMES];
	/* Where the frame's argument is: wait_arg bytes into its spill slots
	 * (0: the first argument, its receiver); in the first TT_ITAB_FRAMES
	 * slots an interface's data word, whose itab (8 bytes before it) must
	 * be wait_itab (runtime address), its own or a wrapper's first field's
	 * (unwrap_iface), else the frame is passed over. */
	__u32 wait_arg[TT_WAIT_FRAMES];
	__u64 wait_itab[TT_WAIT_FRAMES];
	/* Non-zero: the connection the frame names is an inbound one its
	 * goroutine does not read itself (net/http's (*timeoutHandler).ServeHTTP
	 * waits on its context while another goroutine runs the handler):
	 * the goroutine parked reading that connection (its pollDesc's rg) is
	 * read as one more waiter (TT_AF_INBOUND), and this one is not bound.
	 * TT_INBOUND_PIPE: over HTTP/2 the handler reads no socket; the
	 * argument holds (wait_via, wait_via2) the request's stream, whose
	 * body pipe (wait_conn) has the goroutine reading it as its sync.Cond's
	 * first waiter (pipe_head: the cond's notifyList head, a sudog). */
	__u32 wait_inbound[TT_WAIT_FRAMES];
	__u32 pipe_head;
	/* Connections held by AfterFunc registrations on the expiring
	 * context (or its children), found without the detail tier: net's
	 * (*netFD).connect since Go 1.26 (a dial waiting for its handshake),
	 * pgx's context watcher (a query waiting for its answer).
	 * afterfunc_itab: *context.afterFuncCtx as a context.canceler
	 * (runtime address), 0: none read. af_fn: each known closure's entry
	 * (runtime addresses), 0: unused. From its first capture, af_via
	 * (1 + offset, 0: none) are pointers to follow, then af_conn (1 +
	 * offset) is a net.Conn there, or 0: it is the *net.netFD itself. */
	__u64 afterfunc_itab;
	__u64 af_fn[TT_AFTERFUNCS];
	__u64 af_frame_pc[TT_AFTERFUNCS]; /* a pc in the registering call's waiting frame (runtime address), 0: none */
	__u32 af_via[TT_AFTERFUNCS][2];
	__u32 af_conn[TT_AFTERFUNCS];
	__u32 afterfunc_f;   /* context.afterFuncCtx.f (a func value) */
	__u32 netfd_pd;      /* net.netFD.pfd + internal/poll.FD.pd + internal/poll.pollDesc.runtimeCtx */
	__u32 polldesc_fd;   /* runtime.pollDesc.fd */
	__u32 polldesc_rg;   /* runtime.pollDesc.rg: pdNil 0, pdReady 1, pdWait 2, or the g parked reading */
	__u32 polldesc_wg;   /* runtime.pollDesc.wg: likewise, writing (a connect waits writable) */
	/* 1 + the index of net's (*netFD).connect among the waiting frames,
	 * where go_dial_timer looks for the dial's context; 0: not probed. */
	__u32 dial_frame;
	/* A request waiting in net/http's connection pool for a dial
	 * (getConn, Go 1.23+): the dial runs on another goroutine under the
	 * wantConn's context, WithCancel(WithoutCancel(request's)), which is
	 * no child of the request's. The wantConn is found in getConn's frame
	 * by value: a word w whose ctx (wantconn_ctx) is a *cancelCtx
	 * (cancelctx_itab) whose parent is a withoutCancelCtx
	 * (withoutcancel_itab) whose c (withoutcancel_c) is the expiring
	 * context. That dial context's children (the dialer's deadline,
	 * connect's AfterFunc) are then read as the expiring context's.
	 * getconn_lo 0: not read. Runtime addresses. */
	__u64 getconn_lo;
	__u64 getconn_hi;
	__u64 cancelctx_itab;
	__u64 withoutcancel_itab;
	__u32 wantconn_ctx;
	__u32 withoutcancel_c;
};

/* How a waiter was found through an AfterFunc's connection (waiter_af:
 * this state, plus 4 x the index of the closure in af_fn). */
enum tt_go_af_found {
	TT_AF_PARKED = 1,  /* a goroutine parked on the connection in the poller: its stack was read */
	TT_AF_READIED = 2, /* none parked (a dial readied by its socket deadline in the same instant, not run since): the connection only */
	/* Not an AfterFunc's: the goroutine parked reading the inbound
	 * connection of waiter N's waiting frame (wait_inbound), with N in
	 * place of the closure's index; its own waiting frame binds it. */
	TT_AF_INBOUND = 3,
};

/* tt_go_conn_layout.wait_inbound's kinds. */
enum tt_go_inbound_kind {
	TT_INBOUND_POLL = 1, /* the connection's pollDesc: its rg */
	TT_INBOUND_PIPE = 2, /* an HTTP/2 stream's body pipe: its cond's first waiter */
};

/* How a goroutine was bound to a socket. */
enum tt_go_binding_kind {
	TT_BIND_HTTP_ROUNDTRIP = 1, /* net/http: the request was written to this connection */
	TT_BIND_HTTP_END = 2,       /* net/http: the round trip returned */
	TT_BIND_GRPC_STREAM = 3,    /* gRPC: a stream of the goroutine's call opened on this transport */
	TT_BIND_DIAL = 4,           /* a connection dialed under the context of a deadline (goid: its creator) */
};

/* Where the traceparent of a deadline's creation came from. Only append. */
enum tt_go_tp_source {
	TT_TP_NONE = 0,
	TT_TP_HTTP = 1,      /* net/http server: the request's header line */
	TT_TP_GRPC = 2,      /* gRPC server: the stream's metadata, as its HEADERS frame was decoded */
	TT_TP_GOROUTINE = 3, /* inherited from the goroutine that started this one */
	/* Inherited, not used: it could not be shown to be the request's
	 * (inherited_current; a long-lived goroutine a request once started
	 * doing other requests' work). No traceparent is copied. */
	TT_TP_STALE = 4,
	TT_TP_HTTP2 = 5, /* net/http's HTTP/2 server: the stream's HEADERS, found by the stream's context in the deadline's chain */
};

/*
 * google.golang.org/grpc (and golang.org/x/net/http2) layout in the traced
 * binary, resolved in userspace; 0 in has_client/has_server turns that side off.
 */
struct tt_go_grpc_offsets {
	__u64 stream_key_type;  /* type descriptor of grpc.streamKey (runtime address) */
	__u64 tcpconn_itab;     /* itab of *net.TCPConn as a net.Conn (runtime address) */
	__u32 has_client;       /* (*http2Client).NewStream is probed */
	__u32 has_server;       /* (*http2Server).operateHeaders is probed */
	__u32 client_conn;      /* transport.http2Client.conn (a net.Conn) */
	__u32 conn_fd;          /* net.conn.fd (*netFD) */
	__u32 netfd_sysfd;      /* net.netFD.pfd + internal/poll.FD.Sysfd */
	__u32 meta_headers;     /* http2.MetaHeadersFrame.HeadersFrame (*HeadersFrame) */
	__u32 meta_fields;      /* http2.MetaHeadersFrame.Fields ([]hpack.HeaderField) */
	__u32 frame_stream_id;  /* http2.HeadersFrame.FrameHeader.StreamID (uint32) */
	__u32 hf_name;          /* hpack.HeaderField.Name (string) */
	__u32 hf_value;         /* hpack.HeaderField.Value (string) */
	__u32 hf_size;          /* sizeof(hpack.HeaderField) */
	__u32 stream_id;        /* transport.ServerStream: Stream.id (uint32) */
	__u32 stream_st;        /* transport.ServerStream.st (interface; data word at +8: the *http2Server) */
	__u32 valuectx_key;     /* context.valueCtx.key (an any) */
	__u32 valuectx_val;     /* context.valueCtx.val (an any) */
	__u32 stream_embed;     /* offset of the stream's *Stream (grpc-go 1.69-1.7x), whose id is at stream_id;
				   TT_GO_NO_EMBED: the id is in the stream itself */
	__u32 stream_ctx;       /* the stream's ctx (interface), where stream_id is (0 in grpc-go >= 1.8x: the first field) */
	__u32 has_timer;        /* the server's deadline timer closure is probed (go_grpc_timer) */
};

/*
 * Offsets that mean "none" in the tables userspace fills: an enum, not
 * macros, so that bpf2go generates them for Go.
 */
enum tt_go_no_offset {
	TT_GO_NO_EMBED = 0xffffffff,     /* stream_embed: the stream ID is in the stream itself */
	TT_GO_SPAN_UNKNOWN = 0xffffffff, /* sc_off of a span type whose layout is unknown: the walk stops there */
	TT_GO_ROOT_CTX = 0xffffffff,     /* parent_off of a root context (Background, TODO): the walk ends there */
};

/*
 * Dial layout: net.netFD.connect's receiver and context; the fd is read at
 * its call to internal/poll.(*FD).WaitWrite (the SYN is out: the socket has
 * its cookie), whose receiver is &netFD.pfd.
 */
struct tt_go_dial_offsets {
	__u32 netfd_pfd;        /* net.netFD.pfd (internal/poll.FD) */
	__u32 pfd_sysfd;        /* internal/poll.FD.Sysfd */
};

#define TT_GO_CALL_STACK 12

/*
 * The goroutine goid of process pid sent a request on the socket cookie,
 * and what its context allowed: the deadline of the nearest timerCtx above
 * the request's context (has_deadline 0: the call had no deadline at all),
 * the request's trace, and the return addresses up to the caller.
 */
struct tt_go_binding {
	__u64 ts_ns;
	__u64 goid;
	__u64 cookie;     /* 0 when the connection could not be resolved */
	__u32 pid;
	__u8 kind;        /* enum tt_go_binding_kind */
	__u8 has_deadline;
	__u8 trace_found;
	__u8 _pad;
	__u64 deadline_wall;
	__s64 deadline_ext;
	__u8 trace_id[16];
	__u8 span_id[8];
	__u64 pcs[TT_GO_CALL_STACK];
	/* The connection's file descriptor, -1 when unknown: userspace asks the
	 * kernel for the cookie of a socket no hook has seen yet (cookie 0). */
	__s32 fd;
	__u32 _pad2;
};

/* How the walk up the context chain for a span ended. */
enum tt_go_trace_status {
	TT_TRACE_NONE = 0,         /* not attempted: no OpenTelemetry in the binary */
	TT_TRACE_FOUND = 1,        /* a span's context was read */
	TT_TRACE_ROOT = 2,         /* reached the root context: no span above the deadline */
	TT_TRACE_UNKNOWN_CTX = 3,  /* a context type whose parent we cannot follow */
	TT_TRACE_TOO_DEEP = 4,     /* gave up after TT_GO_CHAIN levels */
	TT_TRACE_INVALID = 5,      /* a span was found but its IDs are zero */
	TT_TRACE_CHILD_SPAN = 6,   /* no span above the deadline; the first span started below it */
};

/* A context implementation the chain walk can step through. */
struct tt_go_ctx_itab {
	__u32 parent_off;          /* offset of its parent Context interface in the struct, or TT_GO_ROOT_CTX */
	__u8 is_value;             /* a *context.valueCtx: check its value for a span */
	__u8 is_timer;             /* a *context.timerCtx: a deadline */
	__u8 no_deadline;          /* its Deadline() is not its parent's (context.withoutCancelCtx: none) */
	__u8 _pad;
};

/* A span implementation that may sit in a valueCtx: where its SpanContext is. */
struct tt_go_span_type {
	__u32 sc_off;
	__u32 start_off; /* its start time (a time.Time) + 1; 0: none (a span that records no start) */
};

/* Indexes of the per-CPU probe hit counters. */
enum tt_go_hit {
	TT_GO_HIT_EXPIRY = 0,      /* cold: expiry call sites */
	TT_GO_HIT_CREATE_ENTRY = 1,/* detail: WithDeadlineCause entry */
	TT_GO_HIT_CREATE_RET = 2,  /* detail: WithDeadlineCause returns */
	TT_GO_HIT_DROPPED = 3,     /* events lost: ring buffer full */
	TT_GO_HIT_DETAIL_FULL = 4, /* creations not recorded: detail table full */
	TT_GO_HIT_HTTP_HEADER = 5, /* detail: net/http header keys parsed */
	TT_GO_HIT_HTTP_REQUEST = 6,/* detail: net/http requests read */
	TT_GO_HIT_SPAN_START = 7,  /* detail: OpenTelemetry spans started */
	TT_GO_HIT_ROUNDTRIP = 8,   /* detail: net/http client round trips */
	TT_GO_HIT_GRPC_HEADERS = 9,/* detail: gRPC server HEADERS frames (inbound metadata) */
	TT_GO_HIT_GRPC_STREAM = 10,/* detail: gRPC client streams opened */
	TT_GO_HIT_DIAL = 11,       /* detail: connects (netFD.connect entry, syscall.Connect returns) */
	TT_GO_HIT_NEWPROC = 12,    /* detail: goroutines started (runtime.newproc1 entry and returns) */
	TT_GO_HIT_RACED = 13,      /* cold: timers that fired after a parent's expiry cancelled them (the parent is reported) */
	TT_GO_HIT_STALE = 14,      /* cold: creation or child-span records of another context once at the expiring one's address, not used */
	TT_GO_HIT_STALE_TRACE = 15,/* detail: inherited traceparents not used at a creation: not shown to be its request's (TT_TP_STALE) */
	TT_GO_HIT_CLIENT_TIMER = 16, /* cold: net/http's doCancel ran (its Client.Timeout timer fired, or the program closed Request.Cancel) */
	TT_GO_HIT_MERGED = 17,     /* cold: a deadline's second timer (net/http's Client.Timeout, grpc-go's server timer, and the context's): one expiry, reported once */
	TT_GO_HIT_GRPC_TIMER = 18, /* cold: grpc-go's server deadline timer fired (its closure that calls closeStream) */
	TT_GO_HIT_DIAL_TIMER = 19, /* cold: socket write deadlines fired (runtime.netpollWriteDeadline) */
	TT_GO_HIT_COLD_RUN = 20,   /* cold: every run of a cold-tier program (its traps; a deadline with two timers traps twice) */
	TT_GO_HIT_MAX = 21,
};

/* A power of two: the probe masks its index with it (kernel 6.1's verifier
 * loses the bound of an index read back from the event). */
#define TT_GO_WAITERS 4
#define TT_GO_WAIT_STACK 12

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
	__u8 trace_status;    /* enum tt_go_trace_status */
	__u8 trace_depth;     /* context levels walked above the deadline */
	__u8 trace_flags;
	__u8 _pad[4];
	__u8 trace_id[16];
	__u8 span_id[8];
	__u64 stop_itab;      /* the itab where the walk stopped (TT_TRACE_UNKNOWN_CTX) */
	/* The traceparent header of the request being served by the goroutine
	 * that set the deadline (detail tier, net/http servers), raw text. */
	__u8 traceparent[TT_TRACEPARENT_LEN];
	__u8 traceparent_src; /* enum tt_go_tp_source */
	__u8 waiters;         /* goroutines parked on the context's Done channel, read at the expiry (at most TT_GO_WAITERS) */
	__u8 _pad2[6];
	/* Each waiter: its goroutine id and its stack from g.sched, the parked
	 * pc first, then return addresses up the frame pointers. */
	__u64 waiter_goid[TT_GO_WAITERS];
	__u64 waiter_pcs[TT_GO_WAITERS][TT_GO_WAIT_STACK];
	/* Each waiter's connection, from the first waiting frame in its stack
	 * (struct tt_go_conn_layout): the socket's cookie (0: none generated
	 * yet, or not found), its descriptor (-1: none), and the frame:
	 * 1 + its index in waiter_pcs (0: no waiting frame). */
	__u64 waiter_cookie[TT_GO_WAITERS];
	__s32 waiter_fd[TT_GO_WAITERS];
	__u8 waiter_frame[TT_GO_WAITERS];
	/* The waiter was found through the connection an AfterFunc
	 * registration among the context's children holds (enum
	 * tt_go_af_found | index << 2), not on a Done channel; its
	 * waiter_cookie holds the *net.netFD until resolve_waiter_conns. */
	__u8 waiter_af[TT_GO_WAITERS];
	/* The start time (time.Time wall, ext) of the span found above the
	 * deadline (trace_status TT_TRACE_FOUND), 0 when it records none. */
	__u64 span_start_wall;
	__s64 span_start_ext;
	/* Each waiter's connection (waiter_cookie non-zero) at the expiry: the
	 * bytes received and not yet read by the process (rcv_nxt - copied_seq,
	 * a FIN not counted), the jiffies since its last data segment arrived
	 * (icsk_ack.lrcvtime) and since the process last sent data on it
	 * (lsndtime). jiffies is bpf_jiffies64() at the
	 * expiry: userspace derives HZ from it and ts_ns. */
	__u32 waiter_unread[TT_GO_WAITERS];
	__u32 waiter_rcv_age[TT_GO_WAITERS];
	__u32 waiter_snd_age[TT_GO_WAITERS];
	/* Each waiter's connection at the expiry: the bytes the process had
	 * written and not yet had acknowledged, sent or queued (write_seq -
	 * snd_una). 0: everything was acknowledged, so any retransmit after
	 * the expiry repeats what was written after it (the cancellation's
	 * own close). */
	__u32 waiter_unacked[TT_GO_WAITERS];
	/* Each waiter's connection's loss recovery at the expiry: segments
	 * retransmitted and not yet acknowledged (retrans_out), segments the
	 * kernel holds lost (lost_out), and its congestion state
	 * (icsk_ca_state: 3 recovery, 4 loss after an RTO). */
	__u32 waiter_retrans_out[TT_GO_WAITERS];
	__u32 waiter_lost_out[TT_GO_WAITERS];
	/* Each waiter's g.selectDone: 1 when another case of its select had
	 * won already (a sender, the response, took it), the goroutine not run
	 * since; it was no longer waiting on the context. */
	__u8 waiter_woken[TT_GO_WAITERS];
	/* Each waiter's connection was behind a wrapper (TLS, grpc-go's
	 * syscallConn), not a bare *net.TCPConn. */
	__u8 waiter_wrapped[TT_GO_WAITERS];
	__u8 waiter_ca_state[TT_GO_WAITERS];
	/* The waiter is the goroutine that set the deadline (detail tier),
	 * not parked on the context but elsewhere in a waiting frame at the
	 * expiry: a net/http handler reading its request body. */
	__u8 waiter_creator[TT_GO_WAITERS];
	__u64 jiffies;
	/* The expiring context's parent (its Context interface's data word). */
	__u64 parent_ctx;
	/* From the first stack read at the expiry with a budget frame
	 * (tt_go_offsets.budget_lo) whose request's context (data word) is
	 * the expiring context's parent: the deadline is the one that
	 * function derived from that request's context and the duration its
	 * receiver holds (net/http's setRequestCancel from Client.Timeout,
	 * http.TimeoutHandler's from its own; nothing else between the two
	 * makes a timerCtx of the request's context), so that duration is its
	 * budget (ns). budget_pc: the frame's return address, for userspace to
	 * check that both spill slots read (receiver, request) were live
	 * there; 0: none found. budget_src: enum tt_go_budget_src. */
	__u64 budget_pc;
	__s64 budget_ns;
	__u8 budget_src;
	/* Each waiter's connection's TCP state at the expiry (skc_state:
	 * 1 established, 2 SYN_SENT, ...): a socket still connecting has
	 * its SYN as its one unacknowledged byte, and its congestion state
	 * loss once the SYN's retransmission timer fired. */
	__u8 waiter_sk_state[TT_GO_WAITERS];
	__u8 _pad3[3];
	/* The frame pointer of the first getConn frame read
	 * (tt_go_conn_layout.getconn_lo), where its wantConn is looked for;
	 * 0: none. */
	__u64 getconn_fp;
	/* CLOCK_MONOTONIC when the process began (its thread group leader's
	 * task start_time: the fork that became it, at or before its exec).
	 * No deadline of the process was set before it: deadline - this is
	 * an upper bound of any budget, close to it for a program that sets
	 * its deadline as it starts (a CLI, a one-shot job). */
	__u64 proc_start_ns;
	/* Each waiter's goroutine (its runtime.g): where read_budget walks
	 * its frames again, past the ones kept, for a budget frame. */
	__u64 waiter_g[TT_GO_WAITERS];
	/* The return address of a waiting frame found past the frames kept
	 * (deep_frame: waiter_frame - 1 >= TT_GO_WAIT_STACK); 0 otherwise. */
	__u64 waiter_frame_pc[TT_GO_WAITERS];
};

#endif
