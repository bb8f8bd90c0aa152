package gobin

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// buildLabapp builds the lab application (a gRPC client and server) for
// goarch with extra go build arguments and opens it.
func buildLabapp(t *testing.T, name, goarch string, args ...string) *Binary {
	t.Helper()
	path := filepath.Join(t.TempDir(), "labapp-"+name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", path}, args...), "../lab/testprog/labapp")...)
	cmd.Env = goEnv("GOARCH="+goarch, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build labapp %s: %v\n%s", name, err, out)
	}
	b, err := Open(path)
	if err != nil {
		t.Fatalf("Open(labapp %s): %v", name, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestGRPCLayout resolves the gRPC probes' layout in the lab application
// (grpc-go and x/net from this module's go.sum) and checks the x/net
// offsets against the compiler's.
func TestGRPCLayout(t *testing.T) {
	for _, tc := range []struct{ name, goarch string }{{"plain", "amd64"}, {"arm64", "arm64"}} {
		t.Run(tc.name, func(t *testing.T) {
			b := buildLabapp(t, tc.name, tc.goarch)
			cl, err := b.GRPCClient()
			if err != nil {
				t.Fatal(err)
			}
			if cl.NewStream.Entry == 0 || cl.Conn <= 0 {
				t.Errorf("client layout %+v", cl)
			}
			srv, err := b.GRPCServer()
			if err != nil {
				t.Fatal(err)
			}
			var mh http2.MetaHeadersFrame
			var hf hpack.HeaderField
			var fh http2.FrameHeader
			for _, c := range []struct {
				what      string
				got, want int64
			}{
				{"MetaHeadersFrame.HeadersFrame", srv.MetaHeaders, int64(unsafe.Offsetof(mh.HeadersFrame))},
				{"MetaHeadersFrame.Fields", srv.MetaFields, int64(unsafe.Offsetof(mh.Fields))},
				{"HeadersFrame.FrameHeader.StreamID", srv.FrameStreamID, int64(unsafe.Offsetof(fh.StreamID))}, // FrameHeader is first in HeadersFrame
				{"HeaderField.Name", srv.FieldName, int64(unsafe.Offsetof(hf.Name))},
				{"HeaderField.Value", srv.FieldValue, int64(unsafe.Offsetof(hf.Value))},
				{"sizeof(HeaderField)", srv.FieldSize, int64(unsafe.Sizeof(hf))},
			} {
				if c.got != c.want {
					t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
				}
			}
			if srv.StreamKeyType == 0 || srv.StreamTransport <= srv.StreamID {
				t.Errorf("server stream layout %+v", srv)
			}
			if !strings.Contains(srv.OperateHeaders.Name, "operateHeaders") {
				t.Errorf("operateHeaders resolved as %q", srv.OperateHeaders.Name)
			}
		})
	}
}

// TestGRPCLayoutStripped: without DWARF the layout comes from the table
// generated per grpc-go and x/net release, and it is the one DWARF gives.
func TestGRPCLayoutStripped(t *testing.T) {
	plain := buildLabapp(t, "plain", "amd64")
	stripped := buildLabapp(t, "stripped", "amd64", "-ldflags=-s -w")
	pc, err := plain.GRPCClient()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := stripped.GRPCClient()
	if err != nil {
		t.Fatalf("GRPCClient on a stripped binary: %v", err)
	}
	if pc.Conn != sc.Conn {
		t.Errorf("http2Client.conn: table %d, DWARF %d", sc.Conn, pc.Conn)
	}
	ps, err := plain.GRPCServer()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := stripped.GRPCServer()
	if err != nil {
		t.Fatalf("GRPCServer on a stripped binary: %v", err)
	}
	ps.OperateHeaders, ss.OperateHeaders = Func{}, Func{}
	ps.StreamKeyType, ss.StreamKeyType = 0, 0 // same code, but not compared: the layouts are
	if *ps != *ss {
		t.Errorf("server layout from the table %+v, from DWARF %+v", *ss, *ps)
	}
}

// TestGRPCTableLookup: versions between two in the table borrow the lower
// one's offsets only when the layout did not change across the bracket.
func TestGRPCTableLookup(t *testing.T) {
	st := GRPCFieldRef{modGRPC, typeStrm, "st"}
	for _, tc := range []struct {
		f       GRPCFieldRef
		version string
		want    int64 // -1: no offsets
	}{
		{st, "v1.85.0", 360},
		{st, "v1.74.0", 8},  // 1.72 and 1.76 agree
		{st, "v1.78.0", -1}, // 1.76 and 1.80 differ
		{st, "v1.99.0", -1}, // outside the table
		{st, "v1.85.0-pre", -1},
		{GRPCFieldRef{modXNet, hpackPkg + ".HeaderField", "Value"}, "v0.55.0", 16},
	} {
		got, err := grpcTableLookup(tc.f, tc.version)
		switch {
		case tc.want < 0 && !errors.Is(err, ErrNoOffsets):
			t.Errorf("%s@%s: %d, %v; want ErrNoOffsets", tc.f.Path, tc.version, got, err)
		case tc.want >= 0 && (err != nil || got != tc.want):
			t.Errorf("%s@%s: %d, %v; want %d", tc.f.Path, tc.version, got, err, tc.want)
		}
	}
}

// TestGRPCNotLinked: a program without gRPC says ErrNotFound.
func TestGRPCNotLinked(t *testing.T) {
	b := openVariant(t, variants[0])
	if _, err := b.GRPCClient(); !errors.Is(err, ErrNotFound) {
		t.Errorf("GRPCClient: %v, want ErrNotFound", err)
	}
	if _, err := b.GRPCServer(); !errors.Is(err, ErrNotFound) {
		t.Errorf("GRPCServer: %v, want ErrNotFound", err)
	}
}

// TestGRPCServerTimer proves grpc-go's server deadline timer is found by
// what it does (the operateHeaders closure that calls closeStream) on both
// architectures and without symbols' DWARF: its entry is on the
// time.AfterFunc line that arms it, and a stripped build finds the same
// address as its unstripped twin. The stream's context offset is resolved
// with the rest of the server's layout.
func TestGRPCServerTimer(t *testing.T) {
	entries := map[string]uint64{}
	for _, tc := range []struct{ name, goarch string }{{"plain", "amd64"}, {"arm64", "arm64"}, {"stripped", "amd64"}} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.name == "stripped" {
				args = []string{"-ldflags=-s -w"}
			}
			b := buildLabapp(t, tc.name, tc.goarch, args...)
			fn, err := b.GRPCServerTimer()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(fn.Name, grpcOperateHeader+".func") {
				t.Errorf("found %s", fn.Name)
			}
			if tc.name != "stripped" {
				if line := sourceLine(t, b.Symbolize(fn.Entry)); !strings.Contains(line, "AfterFunc(timeout, func()") {
					t.Errorf("%s starts at %q, want the AfterFunc line", fn.Name, line)
				}
			}
			if tc.goarch == "amd64" {
				if e, ok := entries["amd64"]; ok && e != fn.Entry {
					t.Errorf("entry %#x, its twin's %#x", fn.Entry, e)
				}
				entries["amd64"] = fn.Entry
			}
			srv, err := b.GRPCServer()
			if err != nil {
				t.Fatal(err)
			}
			if srv.StreamCtx < 0 || srv.StreamCtx == srv.StreamID || srv.StreamCtx == srv.StreamTransport {
				t.Errorf("stream context at %d (id %d, transport %d)", srv.StreamCtx, srv.StreamID, srv.StreamTransport)
			}
		})
	}
}
