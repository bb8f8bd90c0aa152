package record

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// fillAll sets every field of the struct v points to a non-zero value, so a
// round trip proves each field is recorded: a field added to an event type
// later and forgotten here, or in the format, fails the test.
func fillAll(t *testing.T, v any) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f, sf := rv.Field(i), rv.Type().Field(i)
		switch {
		case sf.Type == reflect.TypeOf(event.TCPKind(0)):
			f.Set(reflect.ValueOf(event.TCPRTO))
		case sf.Type == reflect.TypeOf(event.TCPState(0)):
			f.Set(reflect.ValueOf(event.TCPState(2 + i%3)))
		case sf.Type == reflect.TypeOf(event.CAState(0)):
			f.Set(reflect.ValueOf(event.CAState(4)))
		case sf.Type == reflect.TypeOf(event.LocalKind(0)):
			f.Set(reflect.ValueOf(event.LocalRunqueue))
		case sf.Type == reflect.TypeOf(event.ExpiryKind(0)):
			f.Set(reflect.ValueOf(event.ExpiredAtCreation))
		case sf.Type == reflect.TypeOf(syscall.Errno(0)):
			f.Set(reflect.ValueOf(syscall.ETIMEDOUT))
		case sf.Type == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(1234567 + i))
		case sf.Type == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(time.Date(2026, 11, 29, 17, 31, 2, 118000000+i, time.UTC)))
		case sf.Type == reflect.TypeOf(netip.AddrPort{}):
			f.Set(reflect.ValueOf(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 213, 0, byte(i)}), 8080)))
		case sf.Type == reflect.TypeOf([]event.Waiter{}):
			f.Set(reflect.ValueOf([]event.Waiter{{Goid: 42, At: "main.call (/src/main.go:10)",
				Stack: []string{"runtime.gopark (/go/src/runtime/proc.go:435)", "main.call (/src/main.go:10)"}}, {Goid: 43},
				{Goid: 44, Conn: 9, ConnFrame: "net/http.(*connReader).Read", ConnUnread: 3, ConnRcvAgo: 4 * time.Millisecond,
					ConnSentAgo: 5 * time.Millisecond, ConnAnswered: true, ConnAnsweredLater: true, Woken: true, ConnTLS: true,
					ConnSend: &event.SendState{Unacked: 100, CAState: event.CALoss, RetransOut: 1, LostOut: 2}, Creator: true},
				{Goid: 45, At: "net.(*netFD).connect (/go/src/net/fd_unix.go)", Conn: 10, ConnFrame: "net.(*netFD).connect", AfterFunc: "net.(*netFD).connect", Readied: true}}))
		case sf.Type == reflect.TypeOf([]string{}):
			f.Set(reflect.ValueOf([]string{"main.call (/src/main.go:10)", "main.main (/src/main.go:3)"}))
		case f.Kind() == reflect.String:
			f.SetString("v-" + sf.Name)
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.CanUint():
			f.SetUint(uint64(i + 1))
		case f.CanInt():
			f.SetInt(int64(i + 1))
		default:
			t.Fatalf("%s.%s: type %s unknown to this test (and probably to the format)", rv.Type(), sf.Name, sf.Type)
		}
	}
}

func TestRoundTripEveryField(t *testing.T) {
	events := []event.Any{new(event.TCP), new(event.Deadline), new(event.SockActivity), new(event.Binding), new(event.Local),
		new(event.Call), new(event.Mark)}
	for _, ev := range events {
		fillAll(t, ev)
	}
	// Also the zero value of each (all fields left out) and an activity TCP event.
	events = append(events, &event.TCP{Kind: event.TCPClose}, &event.Deadline{}, &event.SockActivity{}, &event.Binding{},
		&event.Local{Kind: event.LocalGCPause, Start: 3, Mono: 3},
		&event.Call{Mono: 4, Kind: "http", Remaining: -time.Millisecond}, &event.Call{Mono: 4, Kind: "http", HasDeadline: true, Remaining: -time.Millisecond},
		&event.Call{Mono: 6, Kind: "http", End: true}, &event.Mark{},
		&event.TCP{Kind: event.TCPActivity, Mono: 5, Goid: 7, Sent: true, Peer: netip.MustParseAddrPort("[fe80::1%eth0]:443")})

	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Host: "node-7", Started: time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if err := w.Write(ev); err != nil {
			t.Fatalf("write %T: %v", ev, err)
		}
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Header(); h.Host != "node-7" || h.Version != Version || h.Format != FormatName {
		t.Errorf("header %+v", h)
	}
	for i, want := range events {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("event %d changed in a round trip:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}
}

func TestReaderErrorsNameTheLine(t *testing.T) {
	const hdr = `{"format":"timeout-tracer-events","version":1,"started":"2026-11-29T17:00:00Z"}` + "\n"
	for _, tc := range []struct {
		name, in string
		line     int
		is       error
	}{
		{"empty", "", 1, ErrHeader},
		{"not json", "hello\n", 1, ErrHeader},
		{"other format", `{"format":"pcap","version":1}` + "\n", 1, ErrHeader},
		{"future version", `{"format":"timeout-tracer-events","version":4}` + "\n", 1, ErrVersion},
		{"bad json", hdr + `{"type":"tcp","mono":1,"kind":"rto"}` + "\n{\n", 3, ErrBadEvent},
		{"unknown type", hdr + `{"type":"udp","mono":1}` + "\n", 2, ErrBadEvent},
		{"no type", hdr + "\n" + `{"mono":1}` + "\n", 3, ErrBadEvent},
		{"unknown kind", hdr + `{"type":"tcp","mono":1,"kind":"teleport"}` + "\n", 2, ErrBadEvent},
		{"bad address", hdr + `{"type":"activity","mono":1,"peer":"10.0.0.1"}` + "\n", 2, ErrBadEvent},
		{"bad duration", hdr + `{"type":"tcp","mono":1,"kind":"rto","rto":"fast"}` + "\n", 2, ErrBadEvent},
		{"bad time", hdr + `{"type":"deadline","mono":1,"deadline":"tomorrow"}` + "\n", 2, ErrBadEvent},
		{"bad state", hdr + `{"type":"tcp","mono":1,"kind":"rto","state":"DANCING"}` + "\n", 2, ErrBadEvent},
		{"wrong json type", hdr + `{"type":"binding","mono":"soon"}` + "\n", 2, ErrBadEvent},
		{"local without lost", hdr + `{"type":"local","mono":2,"kind":"gc_pause"}` + "\n", 2, ErrBadEvent},
		{"local unknown kind", hdr + `{"type":"local","mono":2,"kind":"swap","lost":"1ms"}` + "\n", 2, ErrBadEvent},
		{"local start after end", hdr + `{"type":"local","mono":2,"start_mono":3,"kind":"runqueue","lost":"1ms"}` + "\n", 2, ErrBadEvent},
		{"local negative", hdr + `{"type":"local","mono":2,"kind":"throttled","lost":"-1ms"}` + "\n", 2, ErrBadEvent},
		{"too long", hdr + `{"type":"binding","source":"` + strings.Repeat("x", MaxLine) + `"}` + "\n", 2, ErrLineTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(strings.NewReader(tc.in))
			if err == nil {
				for err == nil {
					_, err = r.Read()
				}
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tc.line || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v; want line %d, %v", err, tc.line, tc.is)
			}
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("error %q does not start with its line", err)
			}
		})
	}
}

func TestReaderSkipsBlankLinesAndUnknownFields(t *testing.T) {
	in := `{"format":"timeout-tracer-events","version":1,"started":"2026-11-29T17:00:00Z","future":true}` + "\n\n" +
		`{"type":"binding","mono":9,"pid":3,"goid":4,"cookie":5,"source":"dial","added_later":[1,2]}` + "\n"
	r, err := NewReader(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := &event.Binding{Mono: 9, PID: 3, Goid: 4, Cookie: 5, Source: event.BindDial}
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("got %+v", ev)
	}
}

func TestWriterRefusesWhatItCannotReadBack(t *testing.T) {
	w, err := NewWriter(io.Discard, Header{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ev := range map[string]event.Any{
		"invalid tcp kind":  &event.TCP{Kind: 99},
		"invalid expiry":    &event.Deadline{Kind: 9},
		"year out of range": &event.Deadline{Deadline: time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC)},
		"nil":               nil,
	} {
		if err := w.Write(ev); !errors.Is(err, ErrUnencodable) {
			t.Errorf("%s: err = %v, want ErrUnencodable", name, err)
		}
	}
}

func TestUnnamedStatesSurvive(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, Header{})
	in := &event.TCP{Kind: event.TCPRTO, State: 42, OldState: 1, CAState: 9}
	if err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"state":"state(42)"`) {
		t.Errorf("recorded %s", buf.String())
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Read()
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Errorf("got %+v, %v", out, err)
	}
}

func TestReadingGoesOnAfterABadLine(t *testing.T) {
	in := `{"format":"timeout-tracer-events","version":1}` + "\n" +
		`{"type":"binding","mono":"x"}` + "\n" +
		`{"type":"binding","mono":2,"goid":3,"cookie":4}` + "\n"
	r, err := NewReader(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("bad line: %v", err)
	}
	ev, err := r.Read()
	if err != nil || ev.MonoTime() != 2 {
		t.Fatalf("after the bad line: %v, %v", ev, err)
	}
}
