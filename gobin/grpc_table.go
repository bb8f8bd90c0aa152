package gobin

import (
	"errors"
	"fmt"
)

// The modules whose struct fields the gRPC probes read.
const (
	modGRPC  = "google.golang.org/grpc"
	modXNet  = "golang.org/x/net"
	typeStrm = grpcTransport + ".ServerStream" // grpc-go >= 1.66
	typeOld  = grpcTransport + ".Stream"       // before: the server's stream was a Stream
	// grpc-go >= 1.71: the client's stream; before, a Stream too.
	typeClient = grpcTransport + ".ClientStream"
)

// GRPCFieldRef names a field the gRPC probes read: Module defines Type,
// and its version keys the offsets table.
type GRPCFieldRef struct {
	Module, Type, Path string
}

// GRPCProbeFields lists every gRPC and x/net field the probes read: the
// generator of the offsets table resolves exactly these (a field a
// version lacks, like ServerStream before 1.66, is left out of it).
func GRPCProbeFields() []GRPCFieldRef {
	return []GRPCFieldRef{
		{modGRPC, grpcTransport + ".http2Client", "conn"},
		{modGRPC, typeStrm, "Stream.id"},
		{modGRPC, typeStrm, "Stream"},
		{modGRPC, typeStrm, "st"},
		{modGRPC, typeOld, "id"},
		{modGRPC, typeOld, "st"},
		// The stream's context, where the server's deadline timer finds
		// the call's context (GRPCServerTimer).
		{modGRPC, typeStrm, "Stream.ctx"},
		{modGRPC, typeOld, "ctx"},
		// The client stream's transport, where a call waits for its
		// response headers (waitOnHeader): a *http2Client in the
		// ClientStream (grpc-go >= 1.71) or the Stream before, which held
		// it as a ClientTransport interface from 1.66 (1.66 and 1.68 in the
		// tables).
		{modGRPC, typeClient, "ct"},
		{modGRPC, typeOld, "ct"},
		{modGRPC, typeOld, "ct.data"},
		// A server handler waiting for its client's next message
		// ((*serverStream).RecvMsg): the stream's transport, a
		// ServerTransport interface whose data word is the *http2Server
		// (before grpc-go 1.66; since, through the transport stream, a
		// ServerStream's st), and that transport's net.Conn.
		{modGRPC, modGRPC + ".serverStream", "t"},
		{modGRPC, modGRPC + ".serverStream", "s"},
		{modGRPC, grpcTransport + ".http2Server", "conn"},
		// grpc-go's TLS credentials wrap the *tls.Conn in a syscallConn.
		{modGRPC, modGRPC + "/internal/credentials.syscallConn", "Conn"},
		// x/net's HTTP/2 client: the connection of a round trip.
		{modXNet, http2Pkg + ".ClientConn", "tconn"},
		{modXNet, http2Pkg + ".MetaHeadersFrame", "HeadersFrame"},
		{modXNet, http2Pkg + ".MetaHeadersFrame", "Fields"},
		{modXNet, http2Pkg + ".HeadersFrame", "FrameHeader.StreamID"},
		{modXNet, hpackPkg + ".HeaderField", "Name"},
		{modXNet, hpackPkg + ".HeaderField", "Value"},
		{modXNet, hpackPkg + ".HeaderField", "Sensitive"},
		// x/net's HTTP/2 server: the stream's context, which its
		// request's is (the inbound traceparent is kept by it).
		{modXNet, http2Pkg + ".stream", "ctx"},
		// Its handler reading its request body: the body's server
		// connection and that connection's net.Conn.
		{modXNet, http2Pkg + ".requestBody", "conn"},
		{modXNet, http2Pkg + ".serverConn", "conn"},
		// http.TimeoutHandler over it: from the handler's ResponseWriter
		// to the goroutine waiting on the request's body pipe.
		{modXNet, http2Pkg + ".responseWriter", "rws"},
		{modXNet, http2Pkg + ".responseWriterState", "stream"},
		{modXNet, http2Pkg + ".stream", "body"},
		{modXNet, http2Pkg + ".pipe", "c.notify.head"},
	}
}

// grpcOffset resolves a field the gRPC probes read: from DWARF, else from
// the generated table for the version of the module that defines it.
func (b *Binary) grpcOffset(typ, path string) (int64, error) {
	off, err := b.DWARFFieldOffset(typ, path)
	if !errors.Is(err, errNoDWARF) {
		return off, err
	}
	var ref *GRPCFieldRef
	for _, f := range GRPCProbeFields() {
		if f.Type == typ && f.Path == path {
			ref = &f
			break
		}
	}
	if ref == nil {
		return 0, fmt.Errorf("resolve %s.%s: %w: not a field of the gRPC table", typ, path, ErrNoOffsets)
	}
	version := ""
	for _, m := range b.Modules {
		if m.Path == ref.Module {
			version = moduleVersion(m)
		}
	}
	if version == "" {
		return 0, fmt.Errorf("resolve %s.%s: %w: no version of %s in the build information", typ, path, ErrNoOffsets, ref.Module)
	}
	return grpcTableLookup(*ref, version)
}

// hasGRPCField reports whether typ.path exists for the binary: in DWARF, or
// in the table for its module version (exactly or bracketed).
func (b *Binary) hasGRPCField(typ, path string) bool {
	_, err := b.grpcOffset(typ, path)
	return err == nil
}

// grpcTableLookup finds f for a module version in the generated layouts
// (gobin/layouts/grpc.json), with the bracket rule of the OpenTelemetry
// layouts (otelTableLookup).
func grpcTableLookup(f GRPCFieldRef, version string) (int64, error) {
	off, _, err := moduleTableOffset("grpc", f.Module, version, f.Type, f.Path)
	return off, err
}
