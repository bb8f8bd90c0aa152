package record

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// FormatName and Version identify the format in the header line. Version 2
// added the "local" event type (time a process lost to CPU throttling,
// run-queue waits and GC pauses); version 3 the "call" (outbound calls the
// audit probes saw) and "mark" (time passed) types. An older recording is a
// valid newer one without them, so readers accept MinVersion through Version.
const (
	FormatName = "timeout-tracer-events"
	Version    = 3
	MinVersion = 1
)

// The type tags of event lines.
const (
	TypeTCP      = "tcp"
	TypeDeadline = "deadline"
	TypeActivity = "activity"
	TypeBinding  = "binding"
	TypeLocal    = "local"
	TypeCall     = "call"
	TypeMark     = "mark"
)

// Errors a Reader or Writer wraps; match them with errors.Is.
var (
	ErrHeader       = errors.New("not a timeout-tracer event recording")
	ErrVersion      = errors.New("unsupported recording version")
	ErrBadEvent     = errors.New("bad event")
	ErrUnencodable  = errors.New("event cannot be encoded")
	ErrLineTooLong  = errors.New("line too long")
	errUnknownValue = errors.New("unknown value")
)

// Header is the first line of a recording.
type Header struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Host    string    `json:"host,omitempty"`
	Started time.Time `json:"started"`
	// Note says what was recorded (a command line, a test scenario).
	Note string `json:"note,omitempty"`
}

// line is the union of every event type's fields: one struct decodes any
// line in a single pass, and fields shared by several types (mono, pid,
// cookie, local, peer, goid) keep one name and one meaning.
type line struct {
	Type string `json:"type"`
	Mono uint64 `json:"mono"`
	Time string `json:"time,omitempty"`
	Kind string `json:"kind,omitempty"`

	PID      uint32 `json:"pid,omitempty"`
	TID      uint32 `json:"tid,omitempty"`
	Comm     string `json:"comm,omitempty"`
	CgroupID uint64 `json:"cgroup_id,omitempty"`
	NetNS    uint32 `json:"netns,omitempty"`
	Cookie   uint64 `json:"cookie,omitempty"`
	Local    string `json:"local,omitempty"`
	Peer     string `json:"peer,omitempty"`
	Goid     uint64 `json:"goid,omitempty"`

	State        string `json:"state,omitempty"`
	OldState     string `json:"old_state,omitempty"`
	CAState      string `json:"ca_state,omitempty"`
	SRTT         string `json:"srtt,omitempty"`
	RTTVar       string `json:"rttvar,omitempty"`
	RTO          string `json:"rto,omitempty"`
	Backoff      uint8  `json:"backoff,omitempty"`
	Retransmits  uint8  `json:"retransmits,omitempty"`
	Errno        int64  `json:"errno,omitempty"`
	Error        string `json:"error,omitempty"` // errno's name, for people; readers ignore it
	Cwnd         uint32 `json:"cwnd,omitempty"`
	RetransOut   uint32 `json:"retrans_out,omitempty"`
	LostOut      uint32 `json:"lost_out,omitempty"`
	TotalRetrans uint32 `json:"total_retrans,omitempty"`
	SndWnd       uint32 `json:"snd_wnd,omitempty"`
	Suppressed   uint32 `json:"suppressed,omitempty"`
	Sent         bool   `json:"sent,omitempty"`
	Received     bool   `json:"received,omitempty"`
	AtAttach     bool   `json:"at_attach,omitempty"` // a TCP state read at attach (event.TCP.AtAttach)

	Ctx           uint64   `json:"ctx,omitempty"`
	Deadline      string   `json:"deadline,omitempty"`
	Children      uint64   `json:"children,omitempty"`
	Cancelled     bool     `json:"cancelled,omitempty"`
	ClientTimer   bool     `json:"client_timer,omitempty"`
	ServerTimer   bool     `json:"server_timer,omitempty"`
	DialTimer     bool     `json:"dial_timer,omitempty"`
	TraceID       string   `json:"trace_id,omitempty"`
	SpanID        string   `json:"span_id,omitempty"`
	TraceSource   string   `json:"trace_source,omitempty"`
	TraceSampled  bool     `json:"trace_sampled,omitempty"`
	TraceNote     string   `json:"trace_note,omitempty"`
	Detail        bool     `json:"detail,omitempty"`
	CreatedMono   uint64   `json:"created_mono,omitempty"`
	Created       string   `json:"created,omitempty"`
	CreatedPC     uint64   `json:"created_pc,omitempty"`
	CreatedAt     string   `json:"created_at,omitempty"`
	CreatedStack  []string `json:"created_stack,omitempty"`
	CreatedGoid   uint64   `json:"created_goid,omitempty"`
	Waiters       []waiter `json:"waiters,omitempty"`
	WaitingAt     string   `json:"waiting_at,omitempty"`
	WaitersRead   bool     `json:"waiters_read,omitempty"`
	SpanStart     string   `json:"span_start,omitempty"`
	ProcStart     string   `json:"proc_start,omitempty"`
	SetBudget     string   `json:"set_budget,omitempty"`
	SetBudgetFrom string   `json:"set_budget_from,omitempty"`

	Source string `json:"source,omitempty"`

	StartMono uint64 `json:"start_mono,omitempty"`
	Lost      string `json:"lost,omitempty"`
	Count     uint32 `json:"count,omitempty"`
	Total     string `json:"total,omitempty"`

	HasDeadline bool   `json:"has_deadline,omitempty"`
	Remaining   string `json:"remaining,omitempty"`
	Caller      string `json:"caller,omitempty"`
	End         bool   `json:"end,omitempty"`
}

// sendState is an event.SendState in a recording.
type sendState struct {
	Unacked    uint32         `json:"unacked"`
	CAState    uint8          `json:"ca_state"`
	RetransOut uint32         `json:"retrans_out,omitempty"`
	LostOut    uint32         `json:"lost_out,omitempty"`
	State      event.TCPState `json:"state,omitempty"`
}

func sendStateOf(s *event.SendState) *sendState {
	if s == nil {
		return nil
	}
	return &sendState{Unacked: s.Unacked, CAState: s.CAState, RetransOut: s.RetransOut, LostOut: s.LostOut, State: s.State}
}

func (s *sendState) event() *event.SendState {
	if s == nil {
		return nil
	}
	return &event.SendState{Unacked: s.Unacked, CAState: s.CAState, RetransOut: s.RetransOut, LostOut: s.LostOut, State: s.State}
}

// waiter is an event.Waiter in a recording.
type waiter struct {
	Goid  uint64   `json:"goid,omitempty"`
	At    string   `json:"at,omitempty"`
	Stack []string `json:"stack,omitempty"`
	// The connection it waited on (a socket cookie) and the frame that named it.
	Conn      uint64 `json:"conn,omitempty"`
	ConnFrame string `json:"conn_frame,omitempty"`
	// What it had received and not read at the expiry (event.Waiter).
	ConnUnread   uint32 `json:"conn_unread,omitempty"`
	ConnRcvAgo   string `json:"conn_rcv_ago,omitempty"`
	ConnSentAgo  string `json:"conn_sent_ago,omitempty"`
	ConnAnswered bool   `json:"conn_answered,omitempty"`
	ConnLater    bool   `json:"conn_answered_later,omitempty"`
	Woken        bool   `json:"woken,omitempty"`
	ConnTLS      bool   `json:"conn_tls,omitempty"`
	// The connection's send side at the expiry (event.SendState).
	ConnSend *sendState `json:"conn_send,omitempty"`
	// The goroutine that set the deadline, parked elsewhere (event.Waiter).
	Creator bool `json:"creator,omitempty"`
	// Found through the connection an AfterFunc holds (event.Waiter).
	AfterFunc string `json:"afterfunc,omitempty"`
	Readied   bool   `json:"readied,omitempty"`
}

// toLine fills l (reset by the caller) from an event.
func toLine(ev event.Any, l *line) error {
	var err error
	switch e := ev.(type) {
	case *event.TCP:
		if !e.Kind.Valid() {
			return fmt.Errorf("tcp kind %d: %w", uint8(e.Kind), ErrUnencodable)
		}
		*l = line{
			Type: TypeTCP, Mono: e.Mono, Kind: e.Kind.String(),
			PID: e.PID, Comm: e.Comm, CgroupID: e.CgroupID, NetNS: e.NetNS, Cookie: e.Cookie,
			Local: addrString(e.Local), Peer: addrString(e.Peer), Goid: e.Goid,
			State: stateString(e.State), OldState: stateString(e.OldState), CAState: caString(e.CAState),
			SRTT: durString(e.SRTT), RTTVar: durString(e.RTTVar), RTO: durString(e.RTO),
			Backoff: e.Backoff, Retransmits: e.Retransmits, Errno: int64(e.Errno), Error: e.ErrnoName(),
			Cwnd: e.Cwnd, RetransOut: e.RetransOut, LostOut: e.LostOut, TotalRetrans: e.TotalRetrans,
			SndWnd: e.SndWnd, Suppressed: e.Suppressed, Sent: e.Sent, AtAttach: e.AtAttach,
		}
		l.Time, err = timeString(e.Time)
	case *event.Deadline:
		if e.Kind != 0 && e.Kind != event.TimerFired && e.Kind != event.ExpiredAtCreation {
			return fmt.Errorf("deadline kind %d: %w", uint8(e.Kind), ErrUnencodable)
		}
		*l = line{
			Type: TypeDeadline, Mono: e.Mono, PID: e.PID, TID: e.TID, Comm: e.Comm, Goid: e.Goid,
			Ctx: e.Ctx, Children: e.Children, Cancelled: e.Cancelled, ClientTimer: e.ClientTimer, ServerTimer: e.ServerTimer, DialTimer: e.DialTimer,
			TraceID: e.TraceID, SpanID: e.SpanID, TraceSource: e.TraceSource, TraceSampled: e.TraceSampled, TraceNote: e.TraceNote,
			Detail: e.Detail, CreatedMono: e.CreatedMono, CreatedPC: e.CreatedPC, CreatedAt: e.CreatedAt,
			CreatedStack: e.CreatedStack, CreatedGoid: e.CreatedGoid, WaitingAt: e.WaitingAt, WaitersRead: e.WaitersRead,
		}
		for _, w := range e.Waiters {
			l.Waiters = append(l.Waiters, waiter{Goid: w.Goid, At: w.At, Stack: w.Stack, Conn: w.Conn, ConnFrame: w.ConnFrame,
				ConnUnread: w.ConnUnread, ConnRcvAgo: durString(w.ConnRcvAgo), ConnSentAgo: durString(w.ConnSentAgo), ConnAnswered: w.ConnAnswered, ConnLater: w.ConnAnsweredLater, Woken: w.Woken, ConnTLS: w.ConnTLS, ConnSend: sendStateOf(w.ConnSend), Creator: w.Creator, AfterFunc: w.AfterFunc, Readied: w.Readied})
		}
		if e.Kind != 0 {
			l.Kind = e.Kind.String()
		}
		var err2, err3, err4, err5 error
		l.Time, err = timeString(e.Time)
		l.Deadline, err2 = timeString(e.Deadline)
		l.Created, err3 = timeString(e.Created)
		l.SpanStart, err4 = timeString(e.SpanStart)
		l.ProcStart, err5 = timeString(e.ProcStart)
		l.SetBudget, l.SetBudgetFrom = durString(e.SetBudget), e.SetBudgetFrom
		err = errors.Join(err, err2, err3, err4, err5)
	case *event.SockActivity:
		*l = line{
			Type: TypeActivity, Mono: e.Mono, PID: e.PID, Cookie: e.Cookie,
			Local: addrString(e.Local), Peer: addrString(e.Peer), Goid: e.Goid, Sent: e.Sent, Received: e.Received,
		}
	case *event.Binding:
		*l = line{Type: TypeBinding, Mono: e.Mono, PID: e.PID, Goid: e.Goid, Cookie: e.Cookie, Source: e.Source}
	case *event.Local:
		if !e.Kind.Valid() {
			return fmt.Errorf("local kind %d: %w", uint8(e.Kind), ErrUnencodable)
		}
		if e.Start > e.Mono || e.Lost < 0 || e.Total < 0 {
			return fmt.Errorf("local event: start after end or negative time: %w", ErrUnencodable)
		}
		*l = line{Type: TypeLocal, Mono: e.Mono, StartMono: e.Start, PID: e.PID, Kind: e.Kind.String(),
			Lost: e.Lost.String(), Count: e.Count, Total: durString(e.Total)}
	case *event.Call:
		if e.Kind == "" {
			return fmt.Errorf("call without a kind: %w", ErrUnencodable)
		}
		*l = line{Type: TypeCall, Mono: e.Mono, PID: e.PID, Comm: e.Comm, Goid: e.Goid, Cookie: e.Cookie, Kind: e.Kind,
			HasDeadline: e.HasDeadline, TraceID: e.TraceID, SpanID: e.SpanID, Caller: e.Caller, End: e.End}
		l.Remaining = durString(e.Remaining)
		var err2 error
		l.Time, err = timeString(e.Time)
		l.Deadline, err2 = timeString(e.Deadline)
		err = errors.Join(err, err2)
	case *event.Mark:
		*l = line{Type: TypeMark, Mono: e.Mono}
	case nil:
		return fmt.Errorf("nil event: %w", ErrUnencodable)
	default:
		return fmt.Errorf("event type %T: %w", ev, ErrUnencodable)
	}
	return err
}

// fromLine turns a decoded line into an event, validating what JSON cannot.
func fromLine(l *line) (event.Any, error) {
	var errs []error
	check := func(field string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
	}
	var ev event.Any
	switch l.Type {
	case TypeTCP:
		e := &event.TCP{
			Mono: l.Mono, PID: l.PID, Comm: l.Comm, CgroupID: l.CgroupID, NetNS: l.NetNS, Cookie: l.Cookie,
			Goid: l.Goid, Backoff: l.Backoff, Retransmits: l.Retransmits, Errno: syscall.Errno(l.Errno),
			Cwnd: l.Cwnd, RetransOut: l.RetransOut, LostOut: l.LostOut, TotalRetrans: l.TotalRetrans,
			SndWnd: l.SndWnd, Suppressed: l.Suppressed, Sent: l.Sent, AtAttach: l.AtAttach,
		}
		var err error
		e.Kind, err = event.ParseTCPKind(l.Kind)
		check("kind", err)
		e.Time, err = parseTime(l.Time)
		check("time", err)
		e.Local, err = parseAddr(l.Local)
		check("local", err)
		e.Peer, err = parseAddr(l.Peer)
		check("peer", err)
		e.State, err = parseState(l.State)
		check("state", err)
		e.OldState, err = parseState(l.OldState)
		check("old_state", err)
		e.CAState, err = parseCA(l.CAState)
		check("ca_state", err)
		e.SRTT, err = parseDur(l.SRTT)
		check("srtt", err)
		e.RTTVar, err = parseDur(l.RTTVar)
		check("rttvar", err)
		e.RTO, err = parseDur(l.RTO)
		check("rto", err)
		ev = e
	case TypeDeadline:
		e := &event.Deadline{
			Mono: l.Mono, PID: l.PID, TID: l.TID, Comm: l.Comm, Goid: l.Goid, Ctx: l.Ctx, Children: l.Children, Cancelled: l.Cancelled, ClientTimer: l.ClientTimer, ServerTimer: l.ServerTimer, DialTimer: l.DialTimer,
			TraceID: l.TraceID, SpanID: l.SpanID, TraceSource: l.TraceSource, TraceSampled: l.TraceSampled, TraceNote: l.TraceNote,
			Detail: l.Detail, CreatedMono: l.CreatedMono, CreatedPC: l.CreatedPC, CreatedAt: l.CreatedAt,
			CreatedStack: l.CreatedStack, CreatedGoid: l.CreatedGoid, WaitingAt: l.WaitingAt, WaitersRead: l.WaitersRead,
		}
		for _, w := range l.Waiters {
			uf, err := parseDur(w.ConnRcvAgo)
			check("conn_rcv_ago", err)
			sa, err := parseDur(w.ConnSentAgo)
			check("conn_sent_ago", err)
			e.Waiters = append(e.Waiters, event.Waiter{Goid: w.Goid, At: w.At, Stack: w.Stack, Conn: w.Conn, ConnFrame: w.ConnFrame,
				ConnUnread: w.ConnUnread, ConnRcvAgo: uf, ConnSentAgo: sa, ConnAnswered: w.ConnAnswered, ConnAnsweredLater: w.ConnLater, Woken: w.Woken, ConnTLS: w.ConnTLS, ConnSend: w.ConnSend.event(), Creator: w.Creator, AfterFunc: w.AfterFunc, Readied: w.Readied})
		}
		var err error
		e.Kind, err = parseExpiry(l.Kind)
		check("kind", err)
		e.Time, err = parseTime(l.Time)
		check("time", err)
		e.Deadline, err = parseTime(l.Deadline)
		check("deadline", err)
		e.Created, err = parseTime(l.Created)
		check("created", err)
		e.SpanStart, err = parseTime(l.SpanStart)
		check("span_start", err)
		e.ProcStart, err = parseTime(l.ProcStart)
		check("proc_start", err)
		e.SetBudget, err = parseDur(l.SetBudget)
		check("set_budget", err)
		e.SetBudgetFrom = l.SetBudgetFrom
		ev = e
	case TypeActivity:
		e := &event.SockActivity{Mono: l.Mono, PID: l.PID, Cookie: l.Cookie, Goid: l.Goid, Sent: l.Sent, Received: l.Received}
		var err error
		e.Local, err = parseAddr(l.Local)
		check("local", err)
		e.Peer, err = parseAddr(l.Peer)
		check("peer", err)
		ev = e
	case TypeBinding:
		ev = &event.Binding{Mono: l.Mono, PID: l.PID, Goid: l.Goid, Cookie: l.Cookie, Source: l.Source}
	case TypeLocal:
		e := &event.Local{Mono: l.Mono, Start: l.StartMono, PID: l.PID, Count: l.Count}
		var err error
		e.Kind, err = event.ParseLocalKind(l.Kind)
		check("kind", err)
		if l.Lost == "" {
			check("lost", errors.New("missing"))
		}
		e.Lost, err = parseDur(l.Lost)
		check("lost", err)
		e.Total, err = parseDur(l.Total)
		check("total", err)
		if e.Start > e.Mono {
			check("start_mono", fmt.Errorf("%d is after mono %d", e.Start, e.Mono))
		}
		if e.Lost < 0 || e.Total < 0 {
			check("lost", errors.New("negative"))
		}
		ev = e
	case TypeCall:
		e := &event.Call{Mono: l.Mono, PID: l.PID, Comm: l.Comm, Goid: l.Goid, Cookie: l.Cookie, Kind: l.Kind,
			HasDeadline: l.HasDeadline, TraceID: l.TraceID, SpanID: l.SpanID, Caller: l.Caller, End: l.End}
		if l.Kind == "" {
			check("kind", errors.New("missing"))
		}
		var err error
		e.Time, err = parseTime(l.Time)
		check("time", err)
		e.Deadline, err = parseTime(l.Deadline)
		check("deadline", err)
		e.Remaining, err = parseDur(l.Remaining)
		check("remaining", err)
		ev = e
	case TypeMark:
		ev = &event.Mark{Mono: l.Mono}
	case "":
		return nil, fmt.Errorf("no type: %w", ErrBadEvent)
	default:
		return nil, fmt.Errorf("type %q: %w", l.Type, errors.Join(ErrBadEvent, errUnknownValue))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s event: %w", l.Type, errors.Join(ErrBadEvent, errors.Join(errs...)))
	}
	return ev, nil
}

func addrString(a netip.AddrPort) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func parseAddr(s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, nil
	}
	return netip.ParseAddrPort(s)
}

// Times are written in UTC; only years 0–9999 have an RFC 3339 form.
func timeString(t time.Time) (string, error) {
	if t.IsZero() {
		return "", nil
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return "", fmt.Errorf("time %v: year outside RFC 3339: %w", t, ErrUnencodable)
	}
	return t.UTC().Format(time.RFC3339Nano), nil
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func parseDur(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// States are written by name; a number the kernel may add later keeps the
// "state(N)" form String gives it, so nothing is lost.
func stateString(s event.TCPState) string {
	if s == 0 {
		return ""
	}
	return s.String()
}

func parseState(s string) (event.TCPState, error) {
	if s == "" {
		return 0, nil
	}
	if n, ok := parseNumbered(s, "state("); ok {
		return event.TCPState(n), nil
	}
	// Named states are numbered from 1 without gaps: stop at the first
	// unnamed one.
	for v := event.TCPState(1); v != 0; v++ {
		name := v.String()
		if name == s {
			return v, nil
		}
		if strings.HasPrefix(name, "state(") {
			break
		}
	}
	return 0, fmt.Errorf("tcp state %q: %w", s, errUnknownValue)
}

func caString(s event.CAState) string {
	if s == 0 {
		return ""
	}
	return s.String()
}

func parseCA(s string) (event.CAState, error) {
	if s == "" {
		return 0, nil
	}
	if n, ok := parseNumbered(s, "ca("); ok {
		return event.CAState(n), nil
	}
	for v := event.CAState(0); ; v++ {
		name := v.String()
		if name == s {
			return v, nil
		}
		if strings.HasPrefix(name, "ca(") || v == 255 {
			break
		}
	}
	return 0, fmt.Errorf("ca state %q: %w", s, errUnknownValue)
}

// parseNumbered parses "prefixN)" with N in 0..255.
func parseNumbered(s, prefix string) (uint8, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, ")")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 8)
	if err != nil || strconv.FormatUint(n, 10) != num {
		return 0, false
	}
	return uint8(n), true
}

func parseExpiry(s string) (event.ExpiryKind, error) {
	switch s {
	case "":
		return 0, nil
	case event.TimerFired.String():
		return event.TimerFired, nil
	case event.ExpiredAtCreation.String():
		return event.ExpiredAtCreation, nil
	}
	return 0, fmt.Errorf("expiry kind %q: %w", s, errUnknownValue)
}
