package export

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Format is an output format of the CLI.
type Format string

// The output formats.
const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
)

// Formats lists the accepted values of -o.
var Formats = []Format{FormatTable, FormatJSON}

// ParseFormat validates a -o value.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown output format %q: use one of table, json", s)
}

// TCPJSON is the JSON form of a TCP event: one object per line. Field names
// are a contract read by scripts; add fields, never rename them.
type TCPJSON struct {
	Time         string `json:"time"`
	Kind         string `json:"kind"`
	PID          uint32 `json:"pid"`
	Comm         string `json:"comm"`
	Local        string `json:"local"`
	Peer         string `json:"peer"`
	State        string `json:"state"`
	OldState     string `json:"old_state,omitempty"`
	CAState      string `json:"ca_state"`
	SRTTUs       int64  `json:"srtt_us"`
	RTTVarUs     int64  `json:"rttvar_us"`
	RTOMs        int64  `json:"rto_ms"`
	Backoff      uint8  `json:"backoff"`
	Retransmits  uint8  `json:"retransmits"`
	Cookie       uint64 `json:"cookie"`
	Errno        int    `json:"errno,omitempty"`
	Error        string `json:"error,omitempty"`
	Cwnd         uint32 `json:"cwnd"`
	SndWnd       uint32 `json:"snd_wnd"`
	RetransOut   uint32 `json:"retrans_out"`
	LostOut      uint32 `json:"lost_out"`
	TotalRetrans uint32 `json:"total_retrans"`
	CgroupID     uint64 `json:"cgroup_id"`
	NetNS        uint32 `json:"netns"`
	Suppressed   uint32 `json:"suppressed,omitempty"`
	// AtAttach: not a kernel event but the socket's state read from the
	// kernel when its process was attached (a connection older than the
	// tracer in trouble then: in RTO backoff, SYN retries, zero window).
	AtAttach bool `json:"at_attach,omitempty"`
}

// NewTCPJSON maps an event to its JSON form.
func NewTCPJSON(e *event.TCP) TCPJSON {
	j := TCPJSON{
		Time:         e.Time.UTC().Format(time.RFC3339Nano),
		Kind:         e.Kind.String(),
		PID:          e.PID,
		Comm:         e.Comm,
		Local:        e.Local.String(),
		Peer:         e.Peer.String(),
		State:        e.State.String(),
		CAState:      e.CAState.String(),
		SRTTUs:       e.SRTT.Microseconds(),
		RTTVarUs:     e.RTTVar.Microseconds(),
		RTOMs:        e.RTO.Milliseconds(),
		Backoff:      e.Backoff,
		Retransmits:  e.Retransmits,
		Cookie:       e.Cookie,
		Errno:        int(e.Errno),
		Error:        e.ErrnoName(),
		Cwnd:         e.Cwnd,
		SndWnd:       e.SndWnd,
		RetransOut:   e.RetransOut,
		LostOut:      e.LostOut,
		TotalRetrans: e.TotalRetrans,
		CgroupID:     e.CgroupID,
		NetNS:        e.NetNS,
		Suppressed:   e.Suppressed,
		AtAttach:     e.AtAttach,
	}
	if e.OldState != e.State {
		j.OldState = e.OldState.String()
	}
	return j
}

// TCPWriter writes TCP events as a table or JSON lines.
type TCPWriter struct {
	format Format
	w      io.Writer
	enc    *json.Encoder
	header bool
}

// NewTCPWriter returns a writer for the format.
func NewTCPWriter(w io.Writer, f Format) *TCPWriter {
	return &TCPWriter{format: f, w: w, enc: json.NewEncoder(w)}
}

// Rows are written as they happen, so columns have fixed widths (a
// tabwriter would only align what it buffered).
const tcpRow = "%-12s  %-17s  %-7s  %-15s  %-21s  %-21s  %-11s  %7s  %8s  %7s  %7s  %s\n"

// Write writes one event; table rows are flushed at once so a live stream
// is readable as it happens.
func (w *TCPWriter) Write(e *event.TCP) error {
	if w.format == FormatJSON {
		return w.enc.Encode(NewTCPJSON(e))
	}
	if !w.header {
		fmt.Fprintf(w.w, tcpRow, "TIME", "KIND", "PID", "COMM", "LOCAL", "PEER", "STATE", "SRTT", "RTO", "BACKOFF", "RETRANS", "DETAIL")
		w.header = true
	}
	comm := e.Comm
	if e.PID == 0 {
		comm = "?"
	}
	_, err := fmt.Fprintf(w.w, tcpRow, e.Time.Local().Format("15:04:05.000"), e.Kind, fmt.Sprint(e.PID), comm,
		e.Local, e.Peer, e.State, fmtDur(e.SRTT), fmtDur(e.RTO), fmt.Sprint(e.Backoff), fmt.Sprint(e.Retransmits), detail(e))
	return err
}

func detail(e *event.TCP) string {
	var parts []string
	if n := e.ErrnoName(); n != "" {
		parts = append(parts, n)
	}
	if e.Kind.Retransmit() {
		parts = append(parts, fmt.Sprintf("cwnd=%d lost=%d", e.Cwnd, e.LostOut))
	}
	if e.Kind == event.TCPZeroWindow {
		parts = append(parts, fmt.Sprintf("snd_wnd=%d", e.SndWnd))
	}
	if e.Suppressed > 0 {
		parts = append(parts, fmt.Sprintf("(+%d rate-limited)", e.Suppressed))
	}
	if e.AtAttach {
		parts = append(parts, "(state at attach)")
	}
	return strings.Join(parts, " ")
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}
