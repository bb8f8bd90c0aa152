package gobin

import "testing"

// TestHTTP2BodyReads resolves the HTTP/2 server's request body read (a
// waiting frame: body → server connection → net.Conn) and the way from its
// ResponseWriter to the goroutine reading the body (http.TimeoutHandler
// over HTTP/2) in the lab application, from DWARF and, stripped, from the
// generated layouts: the same offsets, on both architectures.
func TestHTTP2BodyReads(t *testing.T) {
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			var got [2]HTTP2BodyRead
			for i, args := range [][]string{nil, {"-ldflags=-s -w"}} {
				b := buildLabapp(t, goarch+map[int]string{0: "", 1: "-stripped"}[i], goarch, args...)
				reads, err := b.HTTP2BodyReads()
				if err != nil {
					t.Fatal(err)
				}
				var std *HTTP2BodyRead
				for j := range reads {
					if reads[j].Impl == "net/http" {
						std = &reads[j]
					}
				}
				if std == nil {
					t.Fatalf("no net/http HTTP/2 body read among %+v", reads)
				}
				if std.Read.Entry == 0 || std.Conn <= 0 || std.NetConn <= 0 || std.WriterErr != nil || std.Writer != "*net/http.http2responseWriter" ||
					std.Rws != 0 || std.Stream != 0 || std.Body <= 0 || std.PipeHead <= 0 {
					t.Errorf("%+v", *std)
				}
				std.Read = Func{}
				got[i] = *std
			}
			if got[0] != got[1] {
				t.Errorf("DWARF %+v, stripped %+v", got[0], got[1])
			}
		})
	}
}
