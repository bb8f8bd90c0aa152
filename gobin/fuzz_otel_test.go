package gobin

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzOTelPatched overwrites bytes of a stripped OpenTelemetry program
// where the itab and type analysis makes its decisions: moduledata, the
// itab links, the itabs and type descriptors it reads (context and span
// types first), the start of the types section with its names, the build
// information (module versions key the offsets table), and the ELF
// headers. Itabs, TypeAddrOf, ContextItabs and OTelSpanLayout must return
// a result or an error of the package's kinds, never panic.
func FuzzOTelPatched(f *testing.F) {
	path := otelBuild(f, otelLatest, otelVariantNamed(f, "stripped"))
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	b, err := newBinary("seed", bytes.NewReader(seed), nil)
	if err != nil {
		f.Fatal(err)
	}
	type span struct{ start, n uint64 }
	spans := []span{{0, 64 + 56*uint64(len(b.elf.Progs))}}
	at := func(addr, n uint64) {
		if off, err := b.FileOffset(addr); err == nil {
			spans = append(spans, span{off, n})
		}
	}
	for _, name := range []string{".go.module", ".itablink", ".go.buildinfo", ".noptrdata"} {
		if s := b.elf.Section(name); s != nil && s.Type != 8 { // not SHT_NOBITS
			spans = append(spans, span{s.Offset, min(s.Size, 4096)})
		}
	}
	ts, err := b.typeSection()
	if err != nil {
		f.Fatal(err)
	}
	at(ts.start, 1<<16)
	itabs, err := ts.itabs()
	if err != nil {
		f.Fatal(err)
	}
	for _, it := range itabs {
		if it.Interface.PkgPath == "context" || it.Interface.PkgPath == pkgOTelTrace {
			at(it.Addr, 32)
			at(it.TypeAddr, 96)
			at(it.InterfaceAddr, 96)
		}
	}
	if len(spans) < 20 {
		f.Fatalf("only %d spans to patch", len(spans))
	}
	f.Add(uint16(0), uint32(0), []byte{0})
	f.Add(uint16(1), uint32(0x48), []byte{0xff, 0xff, 0xff, 0x7f})
	f.Add(uint16(len(spans)-1), uint32(40), []byte{0x10, 0, 0, 0})
	f.Fuzz(func(t *testing.T, which uint16, off uint32, patch []byte) {
		s := spans[int(which)%len(spans)]
		data := bytes.Clone(seed)
		copy(data[s.start+uint64(off)%s.n:], patch)
		b, err := newBinary("fuzz", bytes.NewReader(data), nil)
		if err != nil {
			return // FuzzOpenPatched checks Open's errors
		}
		kinds := func(what string, err error) {
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNoOffsets) {
				t.Fatalf("%s: error without a kind: %v", what, err)
			}
		}
		_, err = b.Itabs()
		kinds("Itabs", err)
		_, err = b.TypeAddrOf("trace.nonRecordingSpan", pkgOTelTrace)
		kinds("TypeAddrOf", err)
		_, err = b.ContextItabs()
		kinds("ContextItabs", err)
		l, err := b.OTelSpanLayout()
		kinds("OTelSpanLayout", err)
		if err == nil && (len(l.SpanTypes) == 0 || len(l.ContextItabs) == 0) {
			t.Fatalf("OTelSpanLayout without span types or contexts: %+v", l)
		}
	})
}
