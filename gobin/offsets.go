package gobin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

// FieldRef names a struct field the probes read: Type is the Go type's full
// name as in DWARF, Path the field, dotted for nested fields.
type FieldRef struct {
	Type string // e.g. "context.timerCtx"
	Path string // e.g. "deadline" or "cancelCtx.Context"
}

// ProbeFields lists every struct field the probes read. It is the one list:
// the offsets table generator resolves exactly these, and FieldOffset falls
// back to the table only for them.
func ProbeFields() []FieldRef {
	return []FieldRef{
		{"context.timerCtx", "cancelCtx"},
		{"context.timerCtx", "cancelCtx.Context"},
		{"context.timerCtx", "timer"},
		{"context.timerCtx", "deadline"},
		{"context.cancelCtx", "Context"},
		{"context.cancelCtx", "done"},
		{"context.cancelCtx", "children"},
		{"context.cancelCtx", "err"},
		{"context.cancelCtx", "cause"},
		{"context.valueCtx", "Context"},
		{"context.valueCtx", "key"},
		{"context.valueCtx", "val"},
		// Parents the trace-context walk follows (types added in Go 1.21).
		{"context.withoutCancelCtx", "c"},
		{"context.afterFuncCtx", "cancelCtx.Context"},
		{"context.stopCtx", "Context"},
		{"time.Time", "wall"},
		{"time.Time", "ext"},
		{"time.Time", "loc"},
		// net/http client connections, for binding a request to its socket.
		{"net/http.persistConn", "conn"},
		{"net.conn", "fd"},
		{"net.netFD", "pfd"},
		{"internal/poll.FD", "Sysfd"},
		{"net/http.Request", "ctx"},
		// Its Cancel channel: how the Client.Timeout probe tells the
		// *Request among doCancel's captured variables.
		{"net/http.Request", "Cancel"},
		// A request waiting in the pool for its dial: the wantConn's dial
		// context, found in getConn's frame.
		{"net/http.wantConn", "ctx"},
		// Client.Timeout: the budget of the deadline setRequestCancel
		// makes from it.
		{"net/http.Client", "Timeout"},
		// http.TimeoutHandler's: its duration (the budget of the deadline
		// it sets), and the inbound connection behind its ResponseWriter.
		{"net/http.timeoutHandler", "dt"},
		// net.Dialer's Timeout: the budget of the deadline DialContext
		// makes from it, unless its Deadline is set.
		{"net.Dialer", "Timeout"},
		{"net.Dialer", "Deadline"},
		{"net/http.response", "conn"},
		// HTTP/2 (the copy bundled into net/http) and TLS: the HTTP/2
		// round trip's connection, and the TCP connection under a tls.Conn.
		{"net/http.http2ClientConn", "tconn"},
		{"net/http/internal/http2.ClientConn", "tconn"}, // Go 1.27
		{"net/http/internal/http2.ClientRequest", "Context"},
		{"crypto/tls.Conn", "conn"},
		{"runtime.g", "goid"},
		// Who waits on an expiring context: its Done channel's receive
		// queue, each sudog's goroutine and where it parked; the children
		// map of a small swiss map (Go 1.24+).
		{"runtime.hchan", "recvq.first"},
		{"runtime.sudog", "g"},
		{"runtime.sudog", "next"},
		{"runtime.g", "sched.pc"},
		{"runtime.g", "sched.bp"},
		{"runtime.g", "selectDone"},
		// The goroutine that set an expiring deadline, when it is not
		// parked on the context: whether it is parked at all, and a
		// net/http server's handler reading its request body (the
		// connection it reads from).
		{"runtime.g", "atomicstatus"},
		{"net/http.connReader", "conn"},
		{"net/http.conn", "rwc"},
		{"internal/runtime/maps.Map", "dirPtr"},
		{"internal/runtime/maps.Map", "dirLen"},
		// A dial under an expiring context, found among its children
		// (Go 1.26+): the AfterFunc's closure holds the *netFD, whose
		// poller descriptor holds the dialer while it is parked.
		{"context.afterFuncCtx", "f"},
		{"internal/poll.FD", "pd"},
		{"internal/poll.pollDesc", "runtimeCtx"},
		{"runtime.pollDesc", "fd"},
		{"runtime.pollDesc", "rg"},
		{"runtime.pollDesc", "wg"},
		// net/http's HTTP/2 server: the stream's context and its HEADERS
		// frame's decoded fields (the inbound traceparent).
		{"net/http.http2stream", "ctx"},
		{"net/http.http2MetaHeadersFrame", "Fields"},
		{"net/http/internal/http2.stream", "ctx"},              // Go 1.27
		{"net/http/internal/http2.MetaHeadersFrame", "Fields"}, // Go 1.27
		// A handler reading its request body: the body's server
		// connection and that connection's net.Conn, the inbound one.
		{"net/http.http2requestBody", "conn"},
		{"net/http.http2serverConn", "conn"},
		{"net/http/internal/http2.requestBody", "conn"}, // Go 1.27
		{"net/http/internal/http2.serverConn", "conn"},  // Go 1.27
		// http.TimeoutHandler over HTTP/2: from its ResponseWriter to the
		// goroutine waiting on the request's body pipe.
		{"net/http.http2responseWriter", "rws"},
		{"net/http.http2responseWriterState", "stream"},
		{"net/http.http2stream", "body"},
		{"net/http.http2pipe", "c.notify.head"},
		{"vendor/golang.org/x/net/http2/hpack.HeaderField", "Name"},
		{"vendor/golang.org/x/net/http2/hpack.HeaderField", "Value"},
		{"vendor/golang.org/x/net/http2/hpack.HeaderField", "Sensitive"},
	}
}

// fieldReleases bounds the Go 1.x minor releases that have a probe field,
// for the fields that not every release has: {first, last}, 0 unbounded.
// Net/http's bundled HTTP/2 client moved to net/http/internal/http2 in Go
// 1.27.
var fieldReleases = map[FieldRef][2]int{
	{"net/http.http2ClientConn", "tconn"}:                  {0, 26},
	{"net/http/internal/http2.ClientConn", "tconn"}:        {27, 0},
	{"net/http/internal/http2.ClientRequest", "Context"}:   {27, 0},
	{"net/http.http2stream", "ctx"}:                        {0, 26},
	{"net/http.http2MetaHeadersFrame", "Fields"}:           {0, 26},
	{"net/http/internal/http2.stream", "ctx"}:              {27, 0},
	{"net/http/internal/http2.MetaHeadersFrame", "Fields"}: {27, 0},
	{"net/http.http2requestBody", "conn"}:                  {0, 26},
	{"net/http.http2serverConn", "conn"}:                   {0, 26},
	{"net/http/internal/http2.requestBody", "conn"}:        {27, 0},
	{"net/http/internal/http2.serverConn", "conn"}:         {27, 0},
	{"net/http.http2responseWriter", "rws"}:                {0, 26},
	{"net/http.http2responseWriterState", "stream"}:        {0, 26},
	{"net/http.http2stream", "body"}:                       {0, 26},
	{"net/http.http2pipe", "c.notify.head"}:                {0, 26},
	{"internal/runtime/maps.Map", "dirPtr"}:                {24, 0},
	{"internal/runtime/maps.Map", "dirLen"}:                {24, 0},
}

// InRelease reports whether Go 1.minor has the field.
func (f FieldRef) InRelease(minor int) bool {
	r, ok := fieldReleases[f]
	return !ok || (r[0] == 0 || minor >= r[0]) && (r[1] == 0 || minor <= r[1])
}

// FieldOffset returns the byte offset of fieldPath within the struct
// typeName: from DWARF when the binary has it, else from the generated layouts
// (gobin/layouts/go.json) for the binary's Go release (major.minor) and architecture, which covers
// the fields of ProbeFields. Without DWARF and outside the table it returns
// an error wrapping ErrNoOffsets.
func (b *Binary) FieldOffset(typeName, fieldPath string) (int64, error) {
	off, err := b.DWARFFieldOffset(typeName, fieldPath)
	if !errors.Is(err, errNoDWARF) {
		return off, err
	}
	return b.tableFieldOffset(typeName, fieldPath)
}

// presentFieldOffset is FieldOffset for a type the binary is known to have
// (by its itab): one its DWARF does not describe is read from the table
// as in a stripped binary. Go 1.21 and 1.22 keep context.withoutCancelCtx's
// itab without its DWARF type, and ContextItabs failed on it: no context
// walk at all. Not for any type: a type absent from the DWARF can mean the
// program does not have it (a swiss map in a GOEXPERIMENT=noswissmap
// build), which the table, by release, cannot tell.
func (b *Binary) presentFieldOffset(typeName, fieldPath string) (int64, error) {
	off, err := b.FieldOffset(typeName, fieldPath)
	if !errors.Is(err, errTypeNotInDWARF) {
		return off, err
	}
	if off, terr := b.tableFieldOffset(typeName, fieldPath); terr == nil {
		return off, nil
	}
	return 0, err
}

// tableFieldOffset is the offset of fieldPath in typeName from the
// generated layouts for the binary's Go release and architecture.
func (b *Binary) tableFieldOffset(typeName, fieldPath string) (int64, error) {
	release, ok := releaseOf(b.GoVersion)
	if !ok {
		return 0, fmt.Errorf("resolve %s.%s: %w: unparsable version %q", typeName, fieldPath, ErrNoOffsets, b.GoVersion)
	}
	t, err := layoutTable("go")
	if err != nil {
		return 0, fmt.Errorf("resolve %s.%s: %w", typeName, fieldPath, err)
	}
	if off, ok := t.Offset(layout.Key{Version: release, Arch: b.Arch}, typeName, fieldPath); ok {
		return off, nil
	}
	return 0, fmt.Errorf("resolve %s.%s: %w: binary has no DWARF and the table (%s) has no entry for go%s/%s",
		typeName, fieldPath, ErrNoOffsets, strings.Join(t.Toolchains(), ", "), release, b.Arch)
}
