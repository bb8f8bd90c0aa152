package gobin

import (
	"fmt"
	"strings"
)

// The gRPC functions and types the probes use.
const (
	grpcTransport     = "google.golang.org/grpc/internal/transport"
	grpcNewStream     = grpcTransport + ".(*http2Client).NewStream"
	grpcOperateHeader = grpcTransport + ".(*http2Server).operateHeaders"
	grpcPkg           = modGRPC
	http2Pkg          = "golang.org/x/net/http2"
	hpackPkg          = "golang.org/x/net/http2/hpack"
)

// GRPCClientLayout is what binding a gRPC call to its connection needs:
// (*http2Client).NewStream runs on the calling goroutine with the
// transport as its receiver, whose conn is the net.Conn.
type GRPCClientLayout struct {
	NewStream Func
	Conn      int64 // transport.http2Client.conn (a net.Conn)
}

// GRPCServerLayout is what reading a server stream's inbound metadata
// needs: (*http2Server).operateHeaders(t, ctx, frame) gets the hpack-decoded
// fields of each HEADERS frame, and a handler's context holds its stream
// under grpc.streamKey (the data word of the value is the stream).
type GRPCServerLayout struct {
	OperateHeaders Func
	// golang.org/x/net/http2.MetaHeadersFrame: the embedded *HeadersFrame
	// and Fields []hpack.HeaderField.
	MetaHeaders, MetaFields int64
	FrameStreamID           int64 // HeadersFrame.FrameHeader.StreamID (uint32)
	// hpack.HeaderField: Name and Value (strings) and the struct's size.
	FieldName, FieldValue, FieldSize int64
	// The stream type behind grpc.streamKey (transport.ServerStream, or
	// transport.Stream before it): its stream ID (uint32) and its
	// transport (an interface whose data word is the *http2Server). When
	// StreamEmbed is >= 0 the ID is StreamID bytes into the *Stream the
	// stream holds at StreamEmbed (grpc-go 1.69 to 1.7x embedded a
	// pointer); else it is in the stream itself.
	StreamID, StreamTransport, StreamEmbed int64
	// StreamCtx is the stream's context (an interface: the server's
	// WithTimeout of the client's grpc-timeout, under the incoming
	// metadata's valueCtx), in the stream or, when StreamEmbed >= 0, in
	// its *Stream, as StreamID.
	StreamCtx int64
	// StreamKeyType is the link-time address of grpc.streamKey's type
	// descriptor: the key's type word in the valueCtx.
	StreamKeyType uint64
}

// GRPCClient resolves the client layout. A binary without a gRPC client
// gives an error wrapping ErrNotFound; offsets come from DWARF, else from
// the table generated per grpc-go (and x/net) release, and a binary with
// neither gives an error wrapping ErrNoOffsets.
func (b *Binary) GRPCClient() (*GRPCClientLayout, error) {
	fn, err := b.Func(grpcNewStream)
	if err != nil {
		return nil, fmt.Errorf("gRPC client: %w", err)
	}
	conn, err := b.grpcOffset(grpcTransport+".http2Client", "conn")
	if err != nil {
		return nil, err
	}
	return &GRPCClientLayout{NewStream: fn, Conn: conn}, nil
}

// GRPCWait is where a gRPC call waits for its response: WaitOnHeader(s),
// the stream first, whose transport (a *http2Client) is Transport bytes in;
// the transport's net.Conn is GRPCClientLayout.Conn bytes into that.
type GRPCWait struct {
	WaitOnHeader Func
	Transport    int64
}

// GRPCClientWait resolves the client stream's wait for its headers, with
// the same errors as GRPCClient: the stream is a ClientStream since grpc-go
// 1.71, a Stream before, holding its transport as an interface (the
// pointer is its data word) from 1.66 until then.
func (b *Binary) GRPCClientWait() (*GRPCWait, error) {
	recv, path := typeClient, "ct"
	switch {
	case b.hasGRPCField(typeClient, "ct"):
	case b.hasGRPCField(typeOld, "ct.data"):
		recv, path = typeOld, "ct.data"
	default:
		recv = typeOld
	}
	off, err := b.grpcOffset(recv, path)
	if err != nil {
		return nil, err
	}
	fn, err := b.Func("google.golang.org/grpc/internal/transport.(*" + strings.TrimPrefix(recv, grpcTransport+".") + ").waitOnHeader")
	if err != nil {
		return nil, fmt.Errorf("gRPC client wait: %w", err)
	}
	return &GRPCWait{WaitOnHeader: fn, Transport: off}, nil
}

// GRPCServerWait is where a gRPC server handler waits for its client's
// next message (a client or bidirectional stream's Recv): RecvMsg(ss),
// the server stream first, which holds a pointer Via bytes in, to the
// transport (grpc-go before 1.66: serverStream.t, a ServerTransport
// interface whose data word is the *http2Server), or, with Via2 >= 0, to
// the transport stream, which holds the transport Via2 bytes in (since:
// serverStream.s, a *ServerStream, its st); the transport's net.Conn is
// Conn bytes into it.
type GRPCServerWait struct {
	RecvMsg         Func
	Via, Via2, Conn int64
}

// GRPCServerRecv resolves a server stream's wait for its client's message,
// with the same errors as GRPCClient.
func (b *Binary) GRPCServerRecv() (*GRPCServerWait, error) {
	fn, err := b.Func(grpcPkg + ".(*serverStream).RecvMsg")
	if err != nil {
		return nil, fmt.Errorf("gRPC server receive: %w", err)
	}
	conn, err := b.grpcOffset(grpcTransport+".http2Server", "conn")
	if err != nil {
		return nil, err
	}
	w := &GRPCServerWait{RecvMsg: fn, Via2: -1, Conn: conn}
	if t, err := b.grpcOffset(grpcPkg+".serverStream", "t"); err == nil {
		w.Via = t + 8
		return w, nil
	}
	if w.Via, err = b.grpcOffset(grpcPkg+".serverStream", "s"); err != nil {
		return nil, err
	}
	st, err := b.grpcOffset(typeStrm, "st")
	if err != nil {
		return nil, err
	}
	w.Via2 = st + 8
	return w, nil
}

// GRPCServer resolves the server layout, with the same errors as
// GRPCClient.
func (b *Binary) GRPCServer() (*GRPCServerLayout, error) {
	fn, err := b.Func(grpcOperateHeader)
	if err != nil {
		return nil, fmt.Errorf("gRPC server: %w", err)
	}
	l := &GRPCServerLayout{OperateHeaders: fn, StreamEmbed: -1}
	// The server's stream: a Stream up to grpc-go 1.68, then a
	// ServerStream embedding a *Stream, then one embedding a Stream.
	stream, idPath, ctxPath := typeStrm, "Stream.id", "Stream.ctx"
	switch {
	case !b.hasGRPCField(typeStrm, "st"):
		stream, idPath, ctxPath = typeOld, "id", "ctx"
	case !b.hasGRPCField(typeStrm, "Stream.id"):
		embed, err := b.grpcOffset(typeStrm, "Stream")
		if err != nil {
			return nil, err
		}
		id, err := b.grpcOffset(typeOld, "id")
		if err != nil {
			return nil, err
		}
		ctx, err := b.grpcOffset(typeOld, "ctx")
		if err != nil {
			return nil, err
		}
		l.StreamEmbed, l.StreamID, l.StreamCtx = embed, id, ctx
		idPath, ctxPath = "", ""
	}
	for _, f := range []struct {
		typ, path string
		dst       *int64
	}{
		{http2Pkg + ".MetaHeadersFrame", "HeadersFrame", &l.MetaHeaders},
		{http2Pkg + ".MetaHeadersFrame", "Fields", &l.MetaFields},
		{http2Pkg + ".HeadersFrame", "FrameHeader.StreamID", &l.FrameStreamID},
		{hpackPkg + ".HeaderField", "Name", &l.FieldName},
		{hpackPkg + ".HeaderField", "Value", &l.FieldValue},
		{hpackPkg + ".HeaderField", "Sensitive", &l.FieldSize},
		{stream, idPath, &l.StreamID},
		{stream, "st", &l.StreamTransport},
		{stream, ctxPath, &l.StreamCtx},
	} {
		if f.path == "" {
			continue // resolved above
		}
		off, err := b.grpcOffset(f.typ, f.path)
		if err != nil {
			return nil, err
		}
		*f.dst = off
	}
	// HeaderField is {Name, Value string; Sensitive bool}: its size is the
	// bool's offset plus one, rounded up to the pointer alignment.
	l.FieldSize = (l.FieldSize + 1 + int64(b.ptr) - 1) / int64(b.ptr) * int64(b.ptr)
	key, err := b.TypeAddrOf("grpc.streamKey", grpcPkg)
	if err != nil {
		return nil, fmt.Errorf("gRPC server: stream key type: %w", err)
	}
	l.StreamKeyType = key
	return l, nil
}

// fnCloseStream is what grpc-go's server calls to end a stream abnormally.
const fnCloseStream = grpcTransport + ".(*http2Server).closeStream"

// GRPCServerTimer finds the closure grpc-go's server arms, beside the
// stream's context, for a call with a deadline (the client's grpc-timeout):
// operateHeaders makes the stream's context WithTimeout(timeout) and then
// starts time.AfterFunc(timeout, func() { ...; t.closeStream(s, ...) }),
// one deadline, two timers. closeStream cancels the stream's context:
// when that timer's goroutine runs first, the handler is released before
// the context's own timer fires, which then finds the context cancelled
// and nobody waiting (TestCauseGRPCSlowClient: 1 to 6 of 8 so). The
// closure runs only when the call's deadline passes: never on a call that
// ends in time (its timer is stopped).
//
// It is found by what it does: of operateHeaders' closures, the one that
// calls closeStream. Anything but exactly one is an error (no probe rather
// than a wrong one). Its captured words are the transport and the stream
// (and, since grpc-go 1.5x, a channel it waits on first), which the probe
// tells apart by value: the stream's transport field is the transport.
func (b *Binary) GRPCServerTimer() (Func, error) {
	closeStream, err := b.Func(fnCloseStream)
	if err != nil {
		return Func{}, fmt.Errorf("find grpc-go's server deadline timer: %w", err)
	}
	closures, err := b.Funcs(grpcOperateHeader + ".func")
	if err != nil {
		return Func{}, fmt.Errorf("find grpc-go's server deadline timer: %w", err)
	}
	var found []Func
	for _, fn := range closures {
		insts, err := b.disassemble(fn)
		if err != nil {
			return Func{}, fmt.Errorf("find grpc-go's server deadline timer: %w", err)
		}
		for _, i := range insts {
			if i.kind == kindCall && i.target == closeStream.Entry {
				found = append(found, fn)
				break
			}
		}
	}
	if len(found) != 1 {
		return Func{}, fmt.Errorf("find grpc-go's server deadline timer: %d of %d closures of %s call %s: %w",
			len(found), len(closures), grpcOperateHeader, fnCloseStream, ErrNotFound)
	}
	return found[0], nil
}
