package goprobe

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"unsafe"
)

func encodeBinding(tb testing.TB, r gocallsTtGoBinding) []byte {
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.NativeEndian, &r); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzDecodeCall: arbitrary binding records (the call probes' ring
// buffer) become an outbound call or are refused for their length, never
// a panic: a call's trace is whole or absent, its remaining budget exists
// only with a deadline, and its caller is never a frame of net/http or
// context (the code that made the call). The length check and the copy
// are readBindings' own steps; the rest is Process.call.
func FuzzDecodeCall(f *testing.F) {
	p := selfProbes(f)
	f.Add(encodeBinding(f, gocallsTtGoBinding{Kind: uint8(gocallsTtGoBindingKindTT_BIND_HTTP_END)}))
	f.Add(encodeBinding(f, gocallsTtGoBinding{Cookie: 4097, HasDeadline: 1, DeadlineWall: 1 << 63, Pcs: [12]uint64{0x401000, 0x402000}}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < bindingSize {
			return
		}
		var r gocallsTtGoBinding
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), bindingSize), raw)
		c := p.call(&r)
		if (c.TraceID == "") != (c.SpanID == "") || (c.TraceID != "" && (len(c.TraceID) != 32 || len(c.SpanID) != 16)) {
			t.Fatalf("half a trace: %+v", c)
		}
		if !c.HasDeadline && (c.Remaining != 0 || !c.Deadline.IsZero()) {
			t.Fatalf("remaining budget without a deadline: %+v", c)
		}
		if strings.HasPrefix(c.Caller, "net/http.") || strings.HasPrefix(c.Caller, "context.") {
			t.Fatalf("caller inside net/http or context: %q", c.Caller)
		}
	})
}
