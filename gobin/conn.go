package gobin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// HTTP2Client is where one HTTP/2 client implementation starts a request on
// a connection: roundTrip(cc, req, ...) runs on the request's goroutine, cc
// holds the connection's net.Conn (usually a *tls.Conn) TConn bytes in, and
// the request's context.Context is ReqCtx bytes into what req points at.
type HTTP2Client struct {
	Impl      string // "net/http" (the bundled copy), "net/http/internal/http2" (Go 1.27) or "golang.org/x/net/http2"
	Std       bool   // the standard library's (at most one of the first two is linked)
	RoundTrip Func
	TConn     int64
	ReqCtx    int64
}

// The HTTP/2 clients the probes know: the standard library's (the copy
// bundled into net/http, the default for HTTPS; since Go 1.27
// net/http/internal/http2, whose requests are ClientRequests) and
// golang.org/x/net/http2 (http2.Transport, http2.ConfigureTransport). Each
// funnels its requests through the unexported roundTrip (x/net since
// v0.27); older versions did the work in RoundTrip itself.
var http2Clients = []struct {
	impl, recv, typ, req, reqCtx string
	module, std                  bool
}{
	{"net/http", "net/http.(*http2ClientConn)", "net/http.http2ClientConn", "net/http.Request", "ctx", false, true},
	{"net/http/internal/http2", "net/http/internal/http2.(*ClientConn)", "net/http/internal/http2.ClientConn",
		"net/http/internal/http2.ClientRequest", "Context", false, true},
	{http2Pkg, http2Pkg + ".(*ClientConn)", http2Pkg + ".ClientConn", "net/http.Request", "ctx", true, false},
}

// HTTP2Clients resolves the HTTP/2 clients linked into the binary. One
// that is absent is left out; one that is present but whose layout is not
// known (stripped, outside the tables) is an error, joined with the others',
// beside the clients that could be resolved.
func (b *Binary) HTTP2Clients() ([]HTTP2Client, error) {
	var out []HTTP2Client
	var errs []error
	for _, c := range http2Clients {
		fn, err := b.Func(c.recv + ".roundTrip")
		if errors.Is(err, ErrNotFound) {
			fn, err = b.Func(c.recv + ".RoundTrip")
		}
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("HTTP/2 client %s: %w", c.impl, err))
			continue
		}
		var tconn, reqCtx int64
		if c.module {
			tconn, err = b.grpcOffset(c.typ, "tconn")
		} else {
			tconn, err = b.FieldOffset(c.typ, "tconn")
		}
		if err == nil {
			reqCtx, err = b.FieldOffset(c.req, c.reqCtx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("HTTP/2 client %s: %w", c.impl, err))
			continue
		}
		out = append(out, HTTP2Client{Impl: c.impl, Std: c.std, RoundTrip: fn, TConn: tconn, ReqCtx: reqCtx})
	}
	return out, errors.Join(errs...)
}

// ConnWrapper is a net.Conn that wraps another one: the inner net.Conn is
// Inner bytes into the struct the wrapper's pointer points at. Itab is the
// wrapper's itab as a net.Conn (link-time address).
type ConnWrapper struct {
	Type  string // e.g. "*crypto/tls.Conn"
	Itab  uint64
	Inner int64
}

// The wrappers the probes look through to the TCP connection: crypto/tls
// (its conn field), and grpc-go's TLS credentials, which hand the transport
// a syscallConn embedding the *tls.Conn as its net.Conn.
var connWrappers = []struct {
	typ, field string
	module     bool
}{
	{"crypto/tls.Conn", "conn", false},
	{grpcPkg + "/internal/credentials.syscallConn", "Conn", true},
}

// ConnWrappers resolves the wrappers linked into the binary whose net.Conn
// itab exists (a type never used as a net.Conn has none and is left out).
// One whose layout is not known is an error, joined, beside the others.
// Computed once and kept across Release, like DeadlineSites.
func (b *Binary) ConnWrappers() ([]ConnWrapper, error) {
	ws, err := b.results.connWrappers.get(b.connWrappers)
	return slices.Clone(ws), err
}

func (b *Binary) connWrappers() ([]ConnWrapper, error) {
	itabs, err := b.Itabs()
	if err != nil {
		return nil, fmt.Errorf("connection wrappers: %w", err)
	}
	var out []ConnWrapper
	var errs []error
	for _, w := range connWrappers {
		name := "*" + w.typ
		var addr uint64
		for _, it := range itabs {
			if it.Type.String() == name && it.Interface.Name == "net.Conn" && it.Interface.PkgPath == "net" {
				addr = it.Addr
			}
		}
		if addr == 0 {
			continue
		}
		var inner int64
		if w.module {
			inner, err = b.grpcOffset(w.typ, w.field)
		} else {
			inner, err = b.FieldOffset(w.typ, w.field)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("connection wrapper %s: %w", name, err))
			continue
		}
		out = append(out, ConnWrapper{Type: name, Itab: addr, Inner: inner})
	}
	return out, errors.Join(errs...)
}

// HTTP2Server is where one HTTP/2 server implementation turns a stream's
// HEADERS into a request, newWriterAndRequest(sc, st, f), on the
// connection's serve goroutine, and where it closes a stream,
// closeStream(sc, st, err): the stream's context.Context is StreamCtx
// bytes into st (the request's context is that context), the frame's
// decoded fields ([]hpack.HeaderField) MetaFields bytes into f, each field
// FieldSize bytes with its name and value strings at FieldName and
// FieldValue.
type HTTP2Server struct {
	Impl                             string // as HTTP2Client.Impl
	Std                              bool
	NewWriterAndRequest, CloseStream Func
	StreamCtx, MetaFields            int64
	FieldName, FieldValue, FieldSize int64
}

// The HTTP/2 servers the probes know: the standard library's (bundled into
// net/http, serving HTTPS by ALPN; net/http/internal/http2 since Go 1.27)
// and golang.org/x/net/http2's (http2.ConfigureServer: Caddy, h2c).
var http2Servers = []struct {
	impl, recv, stream, frame, hpack string
	module, std                      bool
	body, conn                       string // the request body's type, the server connection's
	// The ResponseWriter its handlers get, its state, the stream's body
	// pipe ("": not known; Go 1.27's is wrapped by net/http).
	writer, state, pipe string
}{
	{"net/http", "net/http.(*http2serverConn)", "net/http.http2stream", "net/http.http2MetaHeadersFrame", stdHpack, false, true,
		"net/http.(*http2requestBody)", "net/http.http2serverConn",
		"net/http.http2responseWriter", "net/http.http2responseWriterState", "net/http.http2pipe"},
	{"net/http/internal/http2", "net/http/internal/http2.(*serverConn)", "net/http/internal/http2.stream",
		"net/http/internal/http2.MetaHeadersFrame", stdHpack, false, true,
		"net/http/internal/http2.(*requestBody)", "net/http/internal/http2.serverConn", "", "", ""},
	{http2Pkg, http2Pkg + ".(*serverConn)", http2Pkg + ".stream", http2Pkg + ".MetaHeadersFrame", hpackPkg, true, false,
		http2Pkg + ".(*requestBody)", http2Pkg + ".serverConn",
		http2Pkg + ".responseWriter", http2Pkg + ".responseWriterState", http2Pkg + ".pipe"},
}

// HTTP2BodyRead is where a handler of one HTTP/2 server implementation
// waits for its request's body: (*requestBody).Read(b, p), parked on the
// body's pipe (a sync.Cond the connection's serve loop signals as DATA
// frames come in: no socket read of its own). b's server connection is
// Conn bytes in, and that connection's net.Conn (the inbound connection,
// usually a *tls.Conn) NetConn bytes into it.
type HTTP2BodyRead struct {
	Impl          string // as HTTP2Client.Impl
	Read          Func
	Conn, NetConn int64
	// The way from the ResponseWriter a handler gets (Writer, its type:
	// its itab as an http.ResponseWriter tells it) to the goroutine
	// reading the request's body: the writer's state (Rws bytes in), its
	// stream (Stream bytes into that), the stream's body pipe (Body), and
	// the first goroutine waiting on the pipe's sync.Cond, a sudog
	// PipeHead bytes into it. Writer "": not known (WriterErr says why).
	Writer                      string
	Rws, Stream, Body, PipeHead int64
	WriterErr                   error
}

// HTTP2BodyReads resolves the HTTP/2 servers' body reads linked into the
// binary, as HTTP2Servers does their request starts.
func (b *Binary) HTTP2BodyReads() ([]HTTP2BodyRead, error) {
	var out []HTTP2BodyRead
	var errs []error
	for _, c := range http2Servers {
		fn, err := b.Func(c.body + ".Read")
		if errors.Is(err, ErrNotFound) {
			continue
		}
		// "pkg.(*T)": the type pkg.T.
		body := strings.Replace(strings.TrimSuffix(c.body, ")"), "(*", "", 1)
		r := HTTP2BodyRead{Impl: c.impl, Read: fn}
		if err == nil {
			err = b.fieldOffsets(c.module, []fieldDst{{body, "conn", &r.Conn}, {c.conn, "conn", &r.NetConn}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("HTTP/2 server %s's body read: %w", c.impl, err))
			continue
		}
		r.WriterErr = fmt.Errorf("HTTP/2 server %s: its ResponseWriter is not known", c.impl)
		if c.writer != "" {
			r.WriterErr = b.fieldOffsets(c.module, []fieldDst{{c.writer, "rws", &r.Rws}, {c.state, "stream", &r.Stream},
				{c.stream, "body", &r.Body}, {c.pipe, "c.notify.head", &r.PipeHead}})
			if r.WriterErr == nil {
				r.Writer = "*" + c.writer
			}
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// stdHpack is the standard library's vendored copy of x/net's hpack.
const stdHpack = "vendor/golang.org/x/net/http2/hpack"

// HTTP2Servers resolves the HTTP/2 servers linked into the binary, as
// HTTP2Clients does the clients: one absent is left out, one whose layout
// is not known is an error, joined.
func (b *Binary) HTTP2Servers() ([]HTTP2Server, error) {
	var out []HTTP2Server
	var errs []error
	for _, c := range http2Servers {
		hdr, err := b.Func(c.recv + ".newWriterAndRequest")
		if errors.Is(err, ErrNotFound) {
			continue
		}
		var cls Func
		if err == nil {
			cls, err = b.Func(c.recv + ".closeStream")
		}
		s := HTTP2Server{Impl: c.impl, Std: c.std, NewWriterAndRequest: hdr, CloseStream: cls}
		var sensitive int64
		if err == nil {
			err = b.fieldOffsets(c.module, []fieldDst{
				{c.stream, "ctx", &s.StreamCtx}, {c.frame, "Fields", &s.MetaFields},
				{c.hpack + ".HeaderField", "Name", &s.FieldName}, {c.hpack + ".HeaderField", "Value", &s.FieldValue},
				{c.hpack + ".HeaderField", "Sensitive", &sensitive},
			})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("HTTP/2 server %s: %w", c.impl, err))
			continue
		}
		// {Name, Value string; Sensitive bool}: the bool's offset plus
		// one, rounded up to the pointer size.
		s.FieldSize = (sensitive + int64(b.ptr)) / int64(b.ptr) * int64(b.ptr)
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// fieldDst is a field to resolve and where its offset goes.
type fieldDst struct {
	typ, path string
	dst       *int64
}

// fieldOffsets resolves fs in order, each from DWARF, else from the
// generated tables: the module's (gRPC's and x/net's) when module, the
// standard library's otherwise. It stops at the first that fails.
func (b *Binary) fieldOffsets(module bool, fs []fieldDst) error {
	for _, f := range fs {
		var err error
		if module {
			*f.dst, err = b.grpcOffset(f.typ, f.path)
		} else {
			*f.dst, err = b.FieldOffset(f.typ, f.path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
