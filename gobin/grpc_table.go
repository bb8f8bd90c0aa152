package gobin

//go:generate go run ./internal/gengrpc -o grpc_offsets_table.go

import (
	"errors"
	"fmt"
	"strings"
)

// The modules whose struct fields the gRPC probes read.
const (
	modGRPC  = "google.golang.org/grpc"
	modXNet  = "golang.org/x/net"
	typeStrm = grpcTransport + ".ServerStream" // grpc-go >= 1.66
	typeOld  = grpcTransport + ".Stream"       // before: the server's stream was a Stream
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
		{modXNet, http2Pkg + ".MetaHeadersFrame", "HeadersFrame"},
		{modXNet, http2Pkg + ".MetaHeadersFrame", "Fields"},
		{modXNet, http2Pkg + ".HeadersFrame", "FrameHeader.StreamID"},
		{modXNet, hpackPkg + ".HeaderField", "Name"},
		{modXNet, hpackPkg + ".HeaderField", "Value"},
		{modXNet, hpackPkg + ".HeaderField", "Sensitive"},
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

// grpcTableLookup finds f for a module version in the generated table. A
// version the table lacks borrows the offsets of the nearest lower version
// only when the nearest higher one has the same offsets for every field of
// f.Type (the layout did not change across the bracket) — the rule of the
// OpenTelemetry table.
func grpcTableLookup(f GRPCFieldRef, version string) (int64, error) {
	noOffsets := func(why string) (int64, error) {
		return 0, fmt.Errorf("resolve %s.%s: %w: %s@%q %s (table: %s)", f.Type, f.Path, ErrNoOffsets,
			f.Module, version, why, strings.Join(grpcTableVersions()[f.Module], ", "))
	}
	key := func(v string, g GRPCFieldRef) otelKey { return otelKey{g.Module, v, g.Type, g.Path} }
	if off, ok := grpcTableOffset(key(version, f)); ok {
		return off, nil
	}
	if _, ok := parseSemver(version); !ok {
		return noOffsets("is not a release version")
	}
	var lo, hi string
	for _, v := range grpcTableVersions()[f.Module] {
		switch c := compareSemver(v, version); {
		case c < 0 && (lo == "" || compareSemver(v, lo) > 0):
			lo = v
		case c > 0 && (hi == "" || compareSemver(v, hi) < 0):
			hi = v
		}
	}
	if lo == "" || hi == "" {
		return noOffsets("is outside the table")
	}
	for _, g := range GRPCProbeFields() {
		if g.Module != f.Module || g.Type != f.Type {
			continue
		}
		a, aok := grpcTableOffset(key(lo, g))
		z, zok := grpcTableOffset(key(hi, g))
		if aok != zok || a != z {
			return noOffsets(fmt.Sprintf("lies between %s and %s, whose %s layouts differ", lo, hi, f.Type))
		}
	}
	off, ok := grpcTableOffset(key(lo, f))
	if !ok {
		return noOffsets(fmt.Sprintf("lies between %s and %s, which lack %s.%s", lo, hi, f.Type, f.Path))
	}
	return off, nil
}
