package tcp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
)

func encode(t testing.TB, r tcpTtTcpEvent) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.NativeEndian, &r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeTCPIPv4(t *testing.T) {
	r := tcpTtTcpEvent{TsNs: 5e9, Cookie: 77, Pid: 42, Family: 2, Sport: 40000, Dport: 8080,
		Kind: uint8(event.TCPRTO), State: 1, CaState: 4, Backoff: 2, Retransmits: 3,
		SrttUs: 300, RttvarUs: 50, RtoJiffies: 102, SndCwnd: 1, Err: -int32(syscall.ETIMEDOUT)}
	copy(r.Comm[:], "client\x00junk")
	copy(r.Saddr[:], []byte{10, 213, 0, 1})
	copy(r.Daddr[:], []byte{10, 213, 0, 2})
	clk := collector.Clock{WallMinusMono: time.Hour, HZ: 250}

	var ev event.TCP
	if err := Decode(encode(t, r), clk, &ev); err != nil {
		t.Fatal(err)
	}
	want := event.TCP{
		Time: time.Unix(5, 0).Add(time.Hour), Mono: 5e9, Kind: event.TCPRTO, PID: 42, Comm: "client",
		Cookie: 77, Local: netip.MustParseAddrPort("10.213.0.1:40000"), Peer: netip.MustParseAddrPort("10.213.0.2:8080"),
		State: 1, OldState: 0, CAState: 4, SRTT: 300 * time.Microsecond, RTTVar: 50 * time.Microsecond,
		RTO: 408 * time.Millisecond, Backoff: 2, Retransmits: 3, Errno: syscall.ETIMEDOUT, Cwnd: 1,
	}
	if !ev.Time.Equal(want.Time) {
		t.Errorf("time %v, want %v", ev.Time, want.Time)
	}
	ev.Time = want.Time
	if ev != want {
		t.Errorf("decoded\n%+v\nwant\n%+v", ev, want)
	}
	if ev.State.String() != "ESTABLISHED" || ev.CAState.String() != "loss" || ev.ErrnoName() != "ETIMEDOUT" {
		t.Errorf("names: %s %s %s", ev.State, ev.CAState, ev.ErrnoName())
	}
}

func TestDecodeTCPIPv6MappedUnmaps(t *testing.T) {
	r := tcpTtTcpEvent{Family: 10, Kind: uint8(event.TCPResetReceived), Sport: 1, Dport: 2}
	copy(r.Saddr[:], netip.MustParseAddr("::ffff:127.0.0.1").AsSlice())
	copy(r.Daddr[:], netip.MustParseAddr("fd00:213::2").AsSlice())
	var ev event.TCP
	if err := Decode(encode(t, r), collector.Clock{HZ: 250}, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Local.String() != "127.0.0.1:1" || ev.Peer.String() != "[fd00:213::2]:2" {
		t.Errorf("addresses %s %s", ev.Local, ev.Peer)
	}
}

func TestDecodeTCPRejects(t *testing.T) {
	good := tcpTtTcpEvent{Family: 2, Kind: uint8(event.TCPTLP)}
	for name, raw := range map[string][]byte{
		"short":          encode(t, good)[:10],
		"empty":          nil,
		"unknown kind":   encode(t, tcpTtTcpEvent{Family: 2, Kind: 200}),
		"zero kind":      encode(t, tcpTtTcpEvent{Family: 2}),
		"unknown family": encode(t, tcpTtTcpEvent{Family: 7, Kind: 1}),
	} {
		var ev event.TCP
		if err := Decode(raw, collector.Clock{HZ: 250}, &ev); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, ev)
		}
	}
}

// The kernel's enum and the Go kinds must agree number for number.
func TestKindsMatchBPF(t *testing.T) {
	pairs := map[tcpTtTcpKind]event.TCPKind{
		tcpTtTcpKindTT_KIND_RTO:               event.TCPRTO,
		tcpTtTcpKindTT_KIND_FAST_RETRANSMIT:   event.TCPFastRetransmit,
		tcpTtTcpKindTT_KIND_TLP:               event.TCPTLP,
		tcpTtTcpKindTT_KIND_SYN_RETRANSMIT:    event.TCPSynRetransmit,
		tcpTtTcpKindTT_KIND_RETRANSMIT:        event.TCPRetransmit,
		tcpTtTcpKindTT_KIND_RESET_RECEIVED:    event.TCPResetReceived,
		tcpTtTcpKindTT_KIND_RESET_SENT:        event.TCPResetSent,
		tcpTtTcpKindTT_KIND_CONNECT_FAILED:    event.TCPConnectFailed,
		tcpTtTcpKindTT_KIND_SOCKET_ERROR:      event.TCPSocketError,
		tcpTtTcpKindTT_KIND_ZERO_WINDOW:       event.TCPZeroWindow,
		tcpTtTcpKindTT_KIND_SYNACK_RETRANSMIT: event.TCPSynAckRetransmit,
		tcpTtTcpKindTT_KIND_CONNECT_ABORTED:   event.TCPConnectAborted,
		tcpTtTcpKindTT_KIND_CONNECT:           event.TCPConnect,
		tcpTtTcpKindTT_KIND_ESTABLISHED:       event.TCPEstablished,
		tcpTtTcpKindTT_KIND_CLOSE:             event.TCPClose,
		tcpTtTcpKindTT_KIND_ACTIVITY:          event.TCPActivity,
		tcpTtTcpKindTT_KIND_CLOSING:           event.TCPClosing,
		tcpTtTcpKindTT_KIND_RETRANSMIT_ACKED:  event.TCPRetransmitAcked,
	}
	for c, g := range pairs {
		if uint8(c) != uint8(g) || !g.Valid() {
			t.Errorf("C kind %d != Go kind %d (%s)", c, g, g)
		}
	}
	if n := len(pairs); n != int(event.TCPRetransmitAcked) {
		t.Errorf("%d kinds mapped, Go knows %d", n, event.TCPRetransmitAcked)
	}
}

// FuzzDecodeTCP: arbitrary samples give an event or an error, never a panic,
// and a decoded event always has a known kind.
func FuzzDecodeTCP(f *testing.F) {
	seed := tcpTtTcpEvent{Family: 2, Kind: uint8(event.TCPRTO), Sport: 1, Dport: 2}
	f.Add(encode(f, seed))
	seed.Family, seed.Kind = 10, uint8(event.TCPConnectFailed)
	f.Add(encode(f, seed))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ev event.TCP
		if err := Decode(raw, collector.Clock{HZ: 250}, &ev); err != nil {
			return
		}
		if !ev.Kind.Valid() || !ev.Local.IsValid() || !ev.Peer.IsValid() {
			t.Fatalf("decoded an invalid event: %+v", ev)
		}
	})
}
