package export

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

func sample() event.TCP {
	return event.TCP{
		Time: time.Date(2026, 11, 29, 17, 0, 0, 123456789, time.UTC), Kind: event.TCPRTO, PID: 42, Comm: "client",
		Cookie: 9, Local: netip.MustParseAddrPort("10.213.0.1:40000"), Peer: netip.MustParseAddrPort("[fd00::2]:8080"),
		State: 1, OldState: 1, CAState: 4, SRTT: 300 * time.Microsecond, RTO: 408 * time.Millisecond,
		Backoff: 1, Retransmits: 2, Errno: syscall.ETIMEDOUT,
	}
}

// The JSON field names and formats are a contract scripts read.
func TestTCPJSONContract(t *testing.T) {
	ev := sample()
	var buf bytes.Buffer
	if err := NewTCPWriter(&buf, FormatJSON).Write(&ev); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("want one line, got %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"time": "2026-11-29T17:00:00.123456789Z", "kind": "rto", "pid": 42.0, "comm": "client",
		"local": "10.213.0.1:40000", "peer": "[fd00::2]:8080", "state": "ESTABLISHED", "srtt_us": 300.0,
		"rto_ms": 408.0, "backoff": 1.0, "retransmits": 2.0, "cookie": 9.0, "error": "ETIMEDOUT", "errno": 110.0,
		"ca_state": "loss",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, m[k], m[k], v)
		}
	}
	if _, ok := m["old_state"]; ok {
		t.Error("old_state present although the state did not change")
	}
}

func TestTCPTable(t *testing.T) {
	ev := sample()
	var buf bytes.Buffer
	w := NewTCPWriter(&buf, FormatTable)
	w.Write(&ev)
	ev.PID, ev.Suppressed = 0, 3
	w.Write(&ev)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("want a header and two rows:\n%s", buf.String())
	}
	for _, s := range []string{"rto", "client", "10.213.0.1:40000", "408.0ms", "ETIMEDOUT"} {
		if !strings.Contains(lines[1], s) {
			t.Errorf("row lacks %q: %s", s, lines[1])
		}
	}
	if !strings.Contains(lines[2], " ? ") || !strings.Contains(lines[2], "(+3 rate-limited)") {
		t.Errorf("unknown owner / suppressed not shown: %s", lines[2])
	}
}

func TestParseFormat(t *testing.T) {
	if f, err := ParseFormat("json"); err != nil || f != FormatJSON {
		t.Fatal(f, err)
	}
	if _, err := ParseFormat("yaml"); err == nil || !strings.Contains(err.Error(), "table, json") {
		t.Fatalf("err %v", err)
	}
}
