package gobin

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

// The OpenTelemetry targets are real programs that link the otel SDK at a
// given version (each version in its own module in a temporary directory,
// resolved through the Go module proxy). They print, from inside
// themselves, what the BPF walk will read: the words of context and span
// interface values, the bytes of the structs those point at, the field
// offsets reflect knows, and the address of main.main for the load bias.

const otelTargetMain = `package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"reflect"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// afCtx has a Done channel of its own and an AfterFunc method, so a
// cancelCtx derived from it holds a context.stopCtx as its parent.
type afCtx struct {
	context.Context
	done chan struct{}
}

func (a afCtx) Done() <-chan struct{}          { return a.done }
func (a afCtx) AfterFunc(func()) func() bool { return func() bool { return true } }

// words returns the two words of the interface value at p.
func words(p unsafe.Pointer) (uintptr, unsafe.Pointer) {
	w := (*[2]unsafe.Pointer)(p)
	return uintptr(w[0]), w[1]
}

// structOf is the struct an interface's data word points at.
func structOf(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

func mem(p unsafe.Pointer, n uintptr) string { return hex.EncodeToString(unsafe.Slice((*byte)(p), n)) }

// fields prints the field offsets reflect gives, one level into embedded structs.
func fields(kind, label string, t reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		fmt.Printf("field %s %s %s %d\n", kind, label, f.Name, f.Offset)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for j := 0; j < f.Type.NumField(); j++ {
				g := f.Type.Field(j)
				fmt.Printf("field %s %s %s.%s %d\n", kind, label, f.Name, g.Name, f.Offset+g.Offset)
			}
		}
	}
}

func printCtx(label string, c context.Context) {
	tab, data := words(unsafe.Pointer(&c))
	t := structOf(reflect.TypeOf(c))
	fmt.Printf("ctx %s %x %x %s %s\n", label, tab, uintptr(data), reflect.TypeOf(c), mem(data, t.Size()))
	fields("ctx", label, t)
}

func printSpan(label string, s trace.Span) {
	var e any = s
	typ, data := words(unsafe.Pointer(&e))
	t := structOf(reflect.TypeOf(e))
	sc := s.SpanContext()
	fmt.Printf("span %s %x %x %s %s %s %s %s\n", label, typ, uintptr(data), t.PkgPath(), reflect.TypeOf(e), sc.TraceID(), sc.SpanID(), mem(data, t.Size()))
	fields("span", label, t)
}

func main() {
	fmt.Printf("main %x\n", reflect.ValueOf(main).Pointer())
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, remote := range []bool{true, false} {
		flags := trace.TraceFlags(0)
		if remote {
			flags = 0x5a
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: remote})
		fmt.Printf("sc %v %s\n", remote, mem(unsafe.Pointer(&sc), unsafe.Sizeof(sc)))
	}
	fields("sc", "SpanContext", reflect.TypeOf(trace.SpanContext{}))

	rsc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	remote := trace.ContextWithRemoteSpanContext(context.Background(), rsc)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	recordingCtx, recording := tp.Tracer("target").Start(remote, "recording")
	defer recording.End()
	_, dropped := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("target").Start(remote, "dropped")
	_, global := otel.Tracer("target").Start(remote, "global")
	_, nop := noop.NewTracerProvider().Tracer("target").Start(recordingCtx, "noop")

	timer, cancel := context.WithTimeout(recordingCtx, time.Hour)
	defer cancel()
	cancelCtx, cancel2 := context.WithCancel(timer)
	defer cancel2()
	without := context.WithoutCancel(cancelCtx)
	stopParent, cancel3 := context.WithCancel(afCtx{without, make(chan struct{})})
	defer cancel3()
	parentField, _ := reflect.TypeOf(stopParent).Elem().FieldByName("Context")
	_, data := words(unsafe.Pointer(&stopParent))
	stop := *(*context.Context)(unsafe.Add(data, parentField.Offset))

	printCtx("remote", remote)
	printCtx("recording", recordingCtx)
	printCtx("timer", timer)
	printCtx("cancel", cancelCtx)
	printCtx("without", without)
	printCtx("stopparent", stopParent)
	printCtx("stop", stop)
	printSpan("remote", trace.SpanFromContext(remote))
	printSpan("recording", recording)
	printSpan("dropped", dropped)
	printSpan("global", global)
	printSpan("noop", nop)
}
`

// otelCtxParents maps each printed context to the printed context that is
// its parent (the others' parents are not printed).
var otelCtxParents = map[string]string{
	"recording":  "remote",
	"timer":      "recording",
	"cancel":     "timer",
	"without":    "cancel",
	"stopparent": "stop",
}

// otelVariant is one way of building an OpenTelemetry target.
type otelVariant struct {
	name   string
	goarch string
	args   []string
	cgo    bool // external linking: needs gcc
	dwarf  bool
}

func (v otelVariant) runs() bool { return v.goarch == "amd64" }

var otelVariants = []otelVariant{
	{name: "plain", goarch: "amd64", dwarf: true},
	{name: "stripped", goarch: "amd64", args: []string{"-ldflags=-s -w"}},
	{name: "pie", goarch: "amd64", args: []string{"-buildmode=pie"}, dwarf: true},
	{name: "pie-stripped", goarch: "amd64", args: []string{"-buildmode=pie", "-ldflags=-s -w"}},
	{name: "trimpath", goarch: "amd64", args: []string{"-trimpath"}, dwarf: true},
	{name: "external-pie-stripped", goarch: "amd64", args: []string{"-buildmode=pie", "-ldflags=-linkmode=external -s -w"}, cgo: true},
	{name: "arm64", goarch: "arm64", dwarf: true},
	{name: "arm64-stripped", goarch: "arm64", args: []string{"-ldflags=-s -w"}},
	// The stripped build's twin with .symtab: "-w -w" is as long as
	// "-s -w" in the recorded build flags, so nothing loaded moves.
	{name: "arm64-symtab", goarch: "arm64", args: []string{"-ldflags=-w -w"}},
}

func otelVariantNamed(t testing.TB, name string) otelVariant {
	for _, v := range otelVariants {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no OpenTelemetry variant %s", name)
	return otelVariant{}
}

const (
	otelLatest = "v1.47.0" // newest on the proxy, in the offsets table
	otelOld    = "v1.24.0" // an old release in the table
	otelMiddle = "v1.26.0" // not in the table: its offsets come from the bracket rule
)

// otelBuilds caches the targets per test binary: one module per otel
// version, built at most once per variant.
var otelBuilds struct {
	mu   sync.Mutex
	srcs map[string]*buildResult // by version: the module directory
	bins map[string]*buildResult // by version/variant
}

// otelSrc writes the target's module for otel version and resolves its
// dependencies.
func otelSrc(t testing.TB, version string) string {
	t.Helper()
	otelBuilds.mu.Lock()
	if otelBuilds.srcs == nil {
		otelBuilds.srcs, otelBuilds.bins = map[string]*buildResult{}, map[string]*buildResult{}
	}
	r, ok := otelBuilds.srcs[version]
	if !ok {
		r = &buildResult{}
		otelBuilds.srcs[version] = r
	}
	otelBuilds.mu.Unlock()
	r.once.Do(func() {
		base := filepath.Join(srcDir(t), "..") // removed by TestMain
		r.path = filepath.Join(base, "otel-"+version)
		if r.err = os.MkdirAll(r.path, 0o755); r.err != nil {
			return
		}
		if r.err = os.WriteFile(filepath.Join(r.path, "go.mod"), []byte("module example.com/oteltarget\n\ngo 1.22\n"), 0o644); r.err != nil {
			return
		}
		if r.err = os.WriteFile(filepath.Join(r.path, "main.go"), []byte(otelTargetMain), 0o644); r.err != nil {
			return
		}
		mods := []string{"go.opentelemetry.io/otel@" + version, "go.opentelemetry.io/otel/trace@" + version, "go.opentelemetry.io/otel/sdk@" + version}
		for _, args := range [][]string{append([]string{"get"}, mods...), {"mod", "tidy"}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = r.path
			cmd.Env = goEnv("GOFLAGS=-mod=mod -buildvcs=false")
			if out, err := cmd.CombinedOutput(); err != nil {
				r.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if r.err != nil {
		// The module proxy is the one outside dependency: say so.
		t.Skipf("resolve OpenTelemetry %s (needs the Go module proxy): %v", version, r.err)
	}
	return r.path
}

// otelBuild returns the OpenTelemetry target at version built as v.
func otelBuild(t testing.TB, version string, v otelVariant) string {
	t.Helper()
	if v.cgo {
		if _, err := exec.LookPath("gcc"); err != nil {
			t.Skipf("variant %s needs gcc for external linking: %v", v.name, err)
		}
	}
	src := otelSrc(t, version)
	otelBuilds.mu.Lock()
	key := version + "/" + v.name
	r, ok := otelBuilds.bins[key]
	if !ok {
		r = &buildResult{}
		otelBuilds.bins[key] = r
	}
	otelBuilds.mu.Unlock()
	r.once.Do(func() {
		r.path = filepath.Join(src, "target-"+v.name)
		args := append([]string{"build", "-o", r.path}, v.args...)
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = src
		cgo := "CGO_ENABLED=0"
		if v.cgo {
			cgo = "CGO_ENABLED=1"
		}
		cmd.Env = goEnv("GOFLAGS=-mod=mod -buildvcs=false", "GOARCH="+v.goarch, cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if r.err != nil {
		t.Fatalf("build OpenTelemetry target %s %s: %v", version, v.name, r.err)
	}
	return r.path
}

// otelReport is what a target printed about itself.
type otelReport struct {
	main   uint64
	ctxs   map[string]ifaceDump
	spans  map[string]ifaceDump
	sc     map[bool][]byte             // SpanContext bytes, by remote
	fields map[string]map[string]int64 // "ctx timer" → field path → offset
}

// ifaceDump is an interface value: its words, its dynamic type as reflect
// names it, and the bytes of the struct its data word points at.
type ifaceDump struct {
	tab, data       uint64
	typ, pkg        string
	traceID, spanID string // spans only
	mem             []byte
}

// words returns the two words at off in d.mem.
func (d ifaceDump) words(t *testing.T, off int64) (uint64, uint64) {
	t.Helper()
	if off < 0 || off+16 > int64(len(d.mem)) {
		t.Fatalf("offset %d outside the %d-byte %s", off, len(d.mem), d.typ)
	}
	return binary.LittleEndian.Uint64(d.mem[off:]), binary.LittleEndian.Uint64(d.mem[off+8:])
}

func runOTelTarget(t *testing.T, path string) *otelReport {
	t.Helper()
	out, err := exec.Command(path).Output()
	if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	r := &otelReport{ctxs: map[string]ifaceDump{}, spans: map[string]ifaceDump{}, sc: map[bool][]byte{}, fields: map[string]map[string]int64{}}
	hexU := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			t.Fatalf("target output %q: %v", s, err)
		}
		return v
	}
	hexB := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatalf("target output %q: %v", s, err)
		}
		return b
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "main":
			r.main = hexU(f[1])
		case len(f) == 3 && f[0] == "sc":
			r.sc[f[1] == "true"] = hexB(f[2])
		case len(f) == 5 && f[0] == "field":
			off, _ := strconv.ParseInt(f[4], 10, 64)
			k := f[1] + " " + f[2]
			if r.fields[k] == nil {
				r.fields[k] = map[string]int64{}
			}
			r.fields[k][f[3]] = off
		case len(f) == 6 && f[0] == "ctx":
			r.ctxs[f[1]] = ifaceDump{tab: hexU(f[2]), data: hexU(f[3]), typ: f[4], mem: hexB(f[5])}
		case len(f) == 9 && f[0] == "span":
			r.spans[f[1]] = ifaceDump{tab: hexU(f[2]), data: hexU(f[3]), pkg: f[4], typ: f[5], traceID: f[6], spanID: f[7], mem: hexB(f[8])}
		default:
			t.Fatalf("unexpected target output line %q", sc.Text())
		}
	}
	if r.main == 0 || len(r.ctxs) != 7 || len(r.spans) != 5 || len(r.sc) != 2 {
		t.Fatalf("incomplete target output:\n%s", out)
	}
	return r
}

// openOTel builds and opens the target, closing it at the end of the test.
func openOTel(t *testing.T, version string, v otelVariant) *Binary {
	t.Helper()
	b, err := Open(otelBuild(t, version, v))
	if err != nil {
		t.Fatalf("Open(%s): %v", v.name, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestOTelSpanLayout proves, against the running target, every value the
// BPF walk will use: itab and type descriptor addresses (minus the load
// bias) equal the words of real interface values; the parent offsets lead
// from each context to its parent's interface words; the valueCtx key and
// val hold the span key type and the span; the trace and span IDs sit at
// SpanContextOffset plus the SpanContext offsets in every span's memory;
// and all offsets equal what reflect says. Stripped builds get their
// offsets from the tables, the others from DWARF.
func TestOTelSpanLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds OpenTelemetry programs")
	}
	for _, version := range []string{otelLatest, otelOld, otelMiddle} {
		for _, v := range otelVariants {
			if !v.runs() || (version != otelLatest && v.name != "plain" && v.name != "stripped") {
				continue
			}
			t.Run(version+"/"+v.name, func(t *testing.T) {
				b := openOTel(t, version, v)
				l, err := b.OTelSpanLayout()
				if err != nil {
					t.Fatalf("OTelSpanLayout: %v", err)
				}
				if got := strings.HasPrefix(l.OffsetsFrom, "DWARF"); got != v.dwarf {
					t.Errorf("offsets from %q, variant has DWARF=%v", l.OffsetsFrom, v.dwarf)
				}
				if !v.dwarf && version == otelMiddle && !strings.Contains(l.OffsetsFrom, "@v1.24.0") {
					t.Errorf("%s is not in the table, offsets from %q: want the bracket's lower end v1.24.0", version, l.OffsetsFrom)
				}
				checkOTelLayout(t, b, l, runOTelTarget(t, b.Path))
			})
		}
	}
}

func checkOTelLayout(t *testing.T, b *Binary, l *OTelLayout, r *otelReport) {
	main, err := b.Func("main.main")
	if err != nil {
		t.Fatal(err)
	}
	bias := r.main - main.Entry
	if !b.PIE && bias != 0 {
		t.Fatalf("non-PIE with load bias %#x", bias)
	}

	// trace.SpanContext: reflect's offsets, and the bytes of two values.
	sc := l.SpanContext
	for name, got := range map[string]int64{"traceID": sc.TraceID, "spanID": sc.SpanID, "traceFlags": sc.TraceFlags, "remote": sc.Remote} {
		if want, ok := r.fields["sc SpanContext"][name]; !ok || got != want {
			t.Errorf("SpanContext.%s at %d, reflect says %d", name, got, want)
		}
	}
	for remote, flags := range map[bool]byte{true: 0x5a, false: 0} {
		m := r.sc[remote]
		if hex.EncodeToString(m[sc.TraceID:sc.TraceID+16]) != "4bf92f3577b34da6a3ce929d0e0e4736" ||
			hex.EncodeToString(m[sc.SpanID:sc.SpanID+8]) != "00f067aa0ba902b7" ||
			m[sc.TraceFlags] != flags || (m[sc.Remote] == 1) != remote {
			t.Errorf("SpanContext{remote: %v, flags %#x} bytes %x do not match layout %+v", remote, flags, m, sc)
		}
	}

	// Spans: type word and the IDs in memory.
	spanTypes := map[TypeName]OTelSpanType{}
	for _, s := range l.SpanTypes {
		spanTypes[s.Type] = s
	}
	for label, s := range r.spans {
		st, ok := spanTypes[TypeName{s.typ, s.pkg}]
		if !ok {
			t.Errorf("span %s: type %s (%s) is not among %+v", label, s.typ, s.pkg, l.SpanTypes)
			continue
		}
		if st.TypeAddr != s.tab-bias {
			t.Errorf("span %s: TypeAddr %#x, the running program's type word is %#x (bias %#x)", label, st.TypeAddr, s.tab, bias)
		}
		if st.Pointer != strings.HasPrefix(s.typ, "*") {
			t.Errorf("span %s: Pointer=%v for %s", label, st.Pointer, s.typ)
		}
		off := st.SpanContextOffset
		if off < 0 || off+sc.SpanID+8 > int64(len(s.mem)) || off+sc.TraceID+16 > int64(len(s.mem)) {
			t.Errorf("span %s: SpanContext offset %d outside the %d-byte struct", label, off, len(s.mem))
			continue
		}
		if got := hex.EncodeToString(s.mem[off+sc.TraceID : off+sc.TraceID+16]); got != s.traceID {
			t.Errorf("span %s: trace ID at %d+%d is %s, want %s", label, off, sc.TraceID, got, s.traceID)
		}
		if got := hex.EncodeToString(s.mem[off+sc.SpanID : off+sc.SpanID+8]); got != s.spanID {
			t.Errorf("span %s: span ID at %d+%d is %s, want %s", label, off, sc.SpanID, got, s.spanID)
		}
		f := r.fields["span "+label]
		if want, ok := f["spanContext"]; ok && want != off {
			t.Errorf("span %s: SpanContextOffset %d, reflect says %d", label, off, want)
		} else if want, ok := f["sc"]; ok && want != off {
			t.Errorf("span %s: SpanContextOffset %d, reflect says %d", label, off, want)
		}
	}
	for _, s := range []TypeName{
		{"*trace.recordingSpan", "go.opentelemetry.io/otel/sdk/trace"},
		{"trace.nonRecordingSpan", "go.opentelemetry.io/otel/trace"},
		{"trace.nonRecordingSpan", "go.opentelemetry.io/otel/sdk/trace"},
	} {
		if _, ok := spanTypes[s]; !ok {
			t.Errorf("no span type %s in %+v", s, l.SpanTypes)
		}
	}
	if len(l.UnknownSpanTypes) != 0 {
		t.Errorf("unknown span types %+v", l.UnknownSpanTypes)
	}

	// Contexts: itabs, parent links, the valueCtx key and val.
	itabs := map[string]ContextItab{}
	for _, c := range l.ContextItabs {
		itabs[c.Type.Name] = c
	}
	for label, c := range r.ctxs {
		ci, ok := itabs[c.typ]
		if !ok {
			t.Errorf("context %s: no itab for %s in %+v", label, c.typ, l.ContextItabs)
			continue
		}
		if ci.Addr != c.tab-bias {
			t.Errorf("context %s: itab %#x, the running program's is %#x (bias %#x)", label, ci.Addr, c.tab, bias)
		}
		f := r.fields["ctx "+label]
		parentField := map[string]string{"*context.timerCtx": "cancelCtx.Context", "context.withoutCancelCtx": "c"}[c.typ]
		if parentField == "" {
			parentField = "Context"
		}
		if want, ok := f[parentField]; !ok || want != ci.ParentOffset {
			t.Errorf("context %s: ParentOffset %d, reflect says %s at %d", label, ci.ParentOffset, parentField, want)
		}
		if p, ok := otelCtxParents[label]; ok {
			tab, data := c.words(t, ci.ParentOffset)
			if want := r.ctxs[p]; tab != want.tab || data != want.data {
				t.Errorf("context %s: parent at %d is (%#x, %#x), want %s's (%#x, %#x)", label, ci.ParentOffset, tab, data, p, want.tab, want.data)
			}
		}
		if ci.Value != (c.typ == "*context.valueCtx") {
			t.Errorf("context %s (%s): Value=%v", label, c.typ, ci.Value)
		}
		if !ci.Value {
			continue
		}
		if f["key"] != ci.KeyOffset || f["val"] != ci.ValOffset {
			t.Errorf("context %s: key, val at %d, %d; reflect says %d, %d", label, ci.KeyOffset, ci.ValOffset, f["key"], f["val"])
		}
		if keyType, _ := c.words(t, ci.KeyOffset); l.SpanKeyType == 0 || keyType-bias != l.SpanKeyType {
			t.Errorf("context %s: key type word %#x, SpanKeyType %#x (bias %#x)", label, keyType, l.SpanKeyType, bias)
		}
		typ, data := c.words(t, ci.ValOffset)
		if span := r.spans[label]; typ != span.tab || data != span.data {
			t.Errorf("context %s: val (%#x, %#x), want the span's (%#x, %#x)", label, typ, data, span.tab, span.data)
		}
	}
	for _, name := range []string{"*context.cancelCtx", "*context.timerCtx", "*context.valueCtx", "context.withoutCancelCtx", "context.stopCtx"} {
		if _, ok := itabs[name]; !ok {
			t.Errorf("no context itab %s", name)
		}
	}
}

// TestOTelSpanLayoutArm64 checks the arm64 cross-builds, which cannot run
// here. Offsets: the stripped build's (from the tables) must equal the
// DWARF build's and what reflect says in the amd64 build (both 64-bit).
// Addresses: the stripped build must give its symtab twin's layout, whose
// go:itab symbols hold the context itabs, and whose span type itabs hold
// the span types' descriptor addresses (read straight from the file).
func TestOTelSpanLayoutArm64(t *testing.T) {
	if testing.Short() {
		t.Skip("builds OpenTelemetry programs")
	}
	layout := func(name string) *OTelLayout {
		l, err := openOTel(t, otelLatest, otelVariantNamed(t, name)).OTelSpanLayout()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return l
	}
	dwarf, got, twin := layout("arm64"), layout("arm64-stripped"), layout("arm64-symtab")
	if dwarf.OffsetsFrom != "DWARF" || !strings.HasPrefix(got.OffsetsFrom, "table") {
		t.Errorf("offsets from %q and %q", dwarf.OffsetsFrom, got.OffsetsFrom)
	}
	if fmt.Sprint(*got) != fmt.Sprint(*twin) {
		t.Errorf("stripped layout\n%+v\nsymtab twin's\n%+v", *got, *twin)
	}
	if got.SpanContext != dwarf.SpanContext {
		t.Errorf("SpanContext %+v, DWARF %+v", got.SpanContext, dwarf.SpanContext)
	}
	offs := func(l *OTelLayout) map[string]int64 {
		m := map[string]int64{}
		for _, s := range l.SpanTypes {
			m[s.Type.String()] = s.SpanContextOffset
		}
		for _, c := range l.ContextItabs {
			m[c.Type.String()] = c.ParentOffset
			m[c.Type.String()+" key"], m[c.Type.String()+" val"] = c.KeyOffset, c.ValOffset
		}
		return m
	}
	if g, w := offs(got), offs(dwarf); !maps.Equal(g, w) {
		t.Errorf("offsets %v, DWARF %v", g, w)
	}
	r := runOTelTarget(t, otelBuild(t, otelLatest, otelVariantNamed(t, "plain")))
	for name, off := range map[string]int64{"traceID": got.SpanContext.TraceID, "spanID": got.SpanContext.SpanID, "traceFlags": got.SpanContext.TraceFlags, "remote": got.SpanContext.Remote} {
		if r.fields["sc SpanContext"][name] != off {
			t.Errorf("arm64 SpanContext.%s at %d, amd64 reflect says %d", name, off, r.fields["sc SpanContext"][name])
		}
	}

	twinPath := otelBuild(t, otelLatest, otelVariantNamed(t, "arm64-symtab"))
	syms := itabSymbols(t, twinPath)
	ef, err := elf.Open(twinPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, c := range got.ContextItabs {
		if name := syms[c.Addr]; name != "go:itab."+c.Type.String()+",context.Context" {
			t.Errorf("context itab %s at %#x, symbol there: %q", c.Type, c.Addr, name)
		}
	}
	checked := 0
	for _, s := range got.SpanTypes {
		for addr, name := range syms {
			if name != "go:itab."+s.Type.String()+",go.opentelemetry.io/otel/trace.Span" {
				continue
			}
			if w := fileWord(t, ef, addr+8); w != s.TypeAddr {
				t.Errorf("span type %s at %#x, its itab %s holds %#x", s.Type, s.TypeAddr, name, w)
			}
			checked++
		}
	}
	if checked < 3 {
		t.Errorf("only %d span types checked against itab symbols", checked)
	}
}

// itabSymbols lists the itab symbols of an unstripped binary by address,
// as go tool nm prints them: an oracle independent of this package.
func itabSymbols(t *testing.T, path string) map[uint64]string {
	t.Helper()
	out, err := exec.Command("go", "tool", "nm", path).Output()
	if err != nil {
		t.Fatalf("go tool nm %s: %v", path, err)
	}
	syms := map[uint64]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		name := strings.Join(f[2:], " ")
		if !strings.HasPrefix(name, "go:itab.") && !strings.HasPrefix(name, "go.itab.") {
			continue
		}
		if addr, err := strconv.ParseUint(f[0], 16, 64); err == nil {
			syms[addr] = name
		}
	}
	return syms
}

// fileWord reads the 64-bit word at a virtual address through debug/elf.
func fileWord(t *testing.T, ef *elf.File, addr uint64) uint64 {
	t.Helper()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+8 <= p.Vaddr+p.Filesz {
			var w [8]byte
			if _, err := p.ReadAt(w[:], int64(addr-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
			return ef.ByteOrder.Uint64(w[:])
		}
	}
	t.Fatalf("address %#x not in the file", addr)
	return 0
}

// TestOTelTableLookup checks the bracket rule of the offsets table: a
// version the table lacks borrows the lower neighbour's offsets only if
// the higher one agrees; versions outside the table or not semantic get
// ErrNoOffsets.
func TestOTelTableLookup(t *testing.T) {
	sc := OTelFieldRef{modOTelTrace, typeSpanCtx, "spanID"}
	exact, _, err := otelTableLookup(sc, "v1.24.0")
	if err != nil {
		t.Fatal(err)
	}
	got, used, err := otelTableLookup(sc, "v1.26.0")
	if err != nil || got != exact || used != "v1.24.0" {
		t.Errorf("v1.26.0: %d from %s, %v; want %d from v1.24.0", got, used, err, exact)
	}
	if _, used, err := otelTableLookup(sc, "v1.47.0-rc.1"); err != nil || used != "v1.43.0" {
		t.Errorf("v1.47.0-rc.1: from %s, %v; want v1.43.0", used, err)
	}
	for _, v := range []string{"v1.19.0", "v1.99.0", "(devel)", "", "v1.47.1-0.20260101000000-abcdefabcdef"} {
		if _, _, err := otelTableLookup(sc, v); !errors.Is(err, ErrNoOffsets) {
			t.Errorf("%q: %v, want ErrNoOffsets", v, err)
		}
	}
	// trace.autoSpan appeared between v1.32.0 and v1.38.0: the table cannot
	// vouch for its layout in between.
	auto := OTelFieldRef{modOTelTrace, pkgOTelTrace + ".autoSpan", "spanContext"}
	otel, err := layoutTable("otel")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.Offset(layout.Key{Module: modOTelTrace, Version: "v1.32.0"}, auto.Type, auto.Path); ok {
		t.Skip("the table has autoSpan at v1.32.0; pick another bracket")
	}
	if _, _, err := otelTableLookup(auto, "v1.35.0"); !errors.Is(err, ErrNoOffsets) {
		t.Errorf("autoSpan at v1.35.0: %v, want ErrNoOffsets", err)
	}
	if _, _, err := otelTableLookup(auto, "v1.40.0"); err != nil {
		t.Errorf("autoSpan at v1.40.0: %v", err)
	}
}

// TestOTelNotLinked: a binary without OpenTelemetry says ErrNotFound.
func TestOTelNotLinked(t *testing.T) {
	b := openVariant(t, variantNamed(t, "stripped"))
	if _, err := b.OTelSpanLayout(); !errors.Is(err, ErrNotFound) {
		t.Errorf("OTelSpanLayout without otel: %v, want ErrNotFound", err)
	}
}
