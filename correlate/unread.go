package correlate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Unread is an answer that had arrived on the connection a request waited
// on and that the process had not read when the request's context expired
// (read at the expiry from the socket: bytes received past what the
// process had read, and the kernel's timestamps, in ticks, of the last
// segment in and out).
type Unread struct {
	Peer  string `json:"peer"`
	Frame string `json:"frame"` // the waiting frame that named the connection
	Bytes uint32 `json:"bytes"`
	// ForMs is how long at least the bytes had waited unread, since the
	// last of them arrived; SentAgoMs how long at most it had been since
	// the process last sent data on the connection (its request).
	ForMs     float64 `json:"for_ms"`
	SentAgoMs float64 `json:"sent_ago_ms"`
}

// Delivered is a request's goroutine that had been handed its answer when
// its context expired and had not run since (event.Waiter.Woken).
type Delivered struct {
	Peer  string `json:"peer"`
	Goid  uint64 `json:"goid"`
	Frame string `json:"frame"` // where it waited: its waiting frame
	// PeerMs is how long at most the peer took: from the request's last
	// byte out to the connection's last byte in.
	PeerMs float64 `json:"peer_ms"`
}

// heldAnswer weighs a slow_peer verdict against an answer the process held
// at the expiry. The peer is slow when it has not answered in time; one
// whose answer was in the process when the timer fired may not have been:
// the process did not read it, or did not run the goroutine it was handed
// to (a starved process: its threads wait for a CPU, its timers fire late,
// its readers run late). Two signs, read at the expiry:
//
//   - answerDelivered: the goroutine waiting for the answer had been
//     handed it (another case of its select had won) and had not run;
//   - the answer was unread in the socket (HTTP/1 only: a multiplexed
//     connection, HTTP/2 or gRPC, carries other streams, and bytes unread
//     on it may be theirs; there the figure is given, the class kept).
//
// Either makes the class local when the peer's part, from the request's
// last byte out to the answer's last byte in (the kernel's ticks: at
// most), is at most half the context's life (when the life is known: its
// creation, or its budget and how late its timer fired), else at most the
// time since the answer arrived. An answer that came late in the life
// leaves slow_peer, said in the note.
func (c *Correlator) heldAnswer(cause *Cause, d *event.Deadline, cands []*evidence) {
	if cause.Class != ClassSlowPeer {
		return
	}
	if answerDelivered(cause, d, cands) {
		return
	}
	var best *event.Waiter
	for i := range d.Waiters {
		w := &d.Waiters[i]
		if w.Conn == 0 || w.ConnUnread == 0 || !w.ConnAnswered || w.ConnRcvAgo == 0 {
			continue
		}
		if best == nil || w.ConnRcvAgo > best.ConnRcvAgo {
			best = w
		}
	}
	if best == nil {
		return
	}
	u := &Unread{Peer: peerOf(best.Conn, cands), Frame: shortFunc(best.ConnFrame), Bytes: best.ConnUnread,
		ForMs: msOf(uint64(best.ConnRcvAgo)), SentAgoMs: msOf(uint64(best.ConnSentAgo))}
	cause.Unread = u
	what := fmt.Sprintf("%d bytes from %s had arrived and waited unread for at least %s before the expiry (the request sent at most %s before it)",
		u.Bytes, u.Peer, fmtDur(uint64(best.ConnRcvAgo)), fmtDur(uint64(best.ConnSentAgo)))
	if !oneAtATime(best.ConnFrame) {
		cause.Note = joinNote(cause.Note, what+"; the class stays slow_peer: the connection is multiplexed, and the bytes may be another stream's")
		return
	}
	peer, why := peerQuick(d, best)
	if why != "" {
		cause.Note = joinNote(cause.Note, what+"; the class stays slow_peer: "+why)
		return
	}
	was := cause.Summary
	cause.Class, cause.Confidence = ClassLocal, Exact
	cause.Summary = fmt.Sprintf("%s answered within %s of the request: %d bytes waited unread in the socket for at least %s before the expiry; the process did not read them in time",
		u.Peer, fmtDur(uint64(peer)), u.Bytes, fmtDur(uint64(best.ConnRcvAgo)))
	cause.Note = joinNote(cause.Note, "without the unread answer the verdict was slow_peer ("+was+")")
}

// answerDelivered finds a waiter that had been woken by its answer before
// the expiry: another case of its select had won (g.selectDone), the
// goroutine not run since. Which case won is not read, so only waits
// whose other cases are the answer count:
//   - HTTP/1's persistConn.roundTrip, with the connection's readLoop
//     waiting on the same context (the readLoop waits on it only after
//     handing the response to roundTrip, an unbuffered send that the
//     woken select took, while the caller reads the body), or with data
//     in on the connection in a tick after the request's last byte went
//     out, on a plain TCP connection. roundTrip alone may have been woken
//     by the request's write completing.
//   - The HTTP/2 clients' roundTrip (the response headers arrived, or the
//     stream was aborted) and gRPC's waitOnHeader (the headers arrived, or
//     the stream ended).
//
// It reports whether it decided the class (local) or said why not.
func answerDelivered(cause *Cause, d *event.Deadline, cands []*evidence) bool {
	var w *event.Waiter
	for i := range d.Waiters {
		x := &d.Waiters[i]
		if x.Conn == 0 || !x.Woken {
			continue
		}
		switch {
		case x.ConnFrame == "net/http.(*persistConn).roundTrip":
			// Over TLS the data in may be the server's session tickets
			// (TLS 1.3 servers other than Go's send them once the
			// client's Finished arrives, with its first request).
			if x.ConnAnsweredLater && !x.ConnTLS || slices.ContainsFunc(d.Waiters, func(y event.Waiter) bool {
				return y.Conn == x.Conn && y.ConnFrame == "net/http.(*persistConn).readLoop"
			}) {
				w = x
			}
		case strings.HasSuffix(x.ConnFrame, ").roundTrip") || strings.HasSuffix(x.ConnFrame, ".waitOnHeader"):
			w = x
		}
		if w != nil {
			break
		}
	}
	if w == nil {
		return false
	}
	dl := &Delivered{Peer: peerOf(w.Conn, cands), Goid: w.Goid, Frame: shortFunc(w.ConnFrame)}
	what := fmt.Sprintf("goroutine %d, waiting in %s, had been handed the answer before the expiry and had not run since", dl.Goid, dl.Frame)
	peer, why := peerQuick(d, w)
	if why != "" {
		cause.Note = joinNote(cause.Note, what+"; the class stays slow_peer: "+why)
		return true
	}
	dl.PeerMs = msOf(uint64(peer))
	was := cause.Summary
	cause.Delivered = dl
	cause.Class, cause.Confidence = ClassLocal, Exact
	cause.Summary = fmt.Sprintf("%s answered within %s of the request: %s; the process did not run it in time", dl.Peer, fmtDur(uint64(peer)), what)
	cause.Note = joinNote(cause.Note, "without the woken waiter the verdict was slow_peer ("+was+")")
	return true
}

// peerQuick bounds the peer's part of waiter w's request, from its
// connection's timestamps: from the request's last byte out to the last
// byte in, at most. why is empty when the peer's part was the smaller one
// of the context's life (at most half of it when the life is known, else
// at most the time since the answer arrived), else says why it may not
// have been.
func peerQuick(d *event.Deadline, w *event.Waiter) (peer time.Duration, why string) {
	if !w.ConnAnswered || w.ConnSentAgo == 0 {
		return 0, "when the peer answered is not known (no data in after the request, or the kernel's tick not known)"
	}
	peer = max(w.ConnSentAgo-w.ConnRcvAgo, 0)
	// An answer in after the deadline instant came when the budget was
	// spent: the peer was late whatever the process did after. The timer
	// firing late (a starved process) lets it arrive before the expiry:
	// on gRPC that is often the server's own deadline status, sent when
	// its copy of the deadline (grpc-timeout) passed. The connection's
	// last byte in is no earlier than the answer, and came ConnRcvAgo
	// before the expiry at least: the answer was in before the deadline
	// when that is at least how late the timer fired.
	if late, ok := d.Late(); ok && w.ConnRcvAgo < late {
		return peer, fmt.Sprintf("the answer may have come in after the deadline (the connection's last byte in was at least %s before the expiry, whose timer fired %s late): the peer had not answered within the budget",
			fmtDur(uint64(w.ConnRcvAgo)), fmtDur(uint64(late)))
	}
	if life, ok := lifeOf(d); ok {
		if 2*peer > life {
			return peer, fmt.Sprintf("the peer took up to %s of the context's %s life", fmtDur(uint64(peer)), fmtDur(uint64(life)))
		}
		return peer, ""
	}
	if peer > w.ConnRcvAgo {
		return peer, "the peer may have taken the larger part of the time since the request"
	}
	return peer, ""
}

// peerOf names the candidate with cookie, "" when none.
func peerOf(cookie uint64, cands []*evidence) string {
	for _, e := range cands {
		if e.cookie == cookie {
			return e.peerName()
		}
	}
	return ""
}

// lifeOf is the context's life up to the expiry: from its creation when
// seen, else its budget (from its span's start) and how late its timer
// fired. Not from the process's start: a bound that can be far longer than
// the context's life would make a slow peer's part look small.
func lifeOf(d *event.Deadline) (time.Duration, bool) {
	if e, ok := d.Elapsed(); ok {
		return e, true
	}
	b, from, ok := d.BudgetFrom()
	late, ok2 := d.Late()
	if !ok || !ok2 || b <= 0 || from == "process_start" {
		return 0, false
	}
	return b + late, true
}

// heldLocal is whether cause is local from an answer the process held
// (heldAnswer), not from the absence of network I/O.
func heldLocal(cause *Cause) bool {
	return cause.Class == ClassLocal && (cause.Unread != nil || cause.Delivered != nil)
}

// inboundReads are the waiting frames where a server waits to read its
// client's request: gRPC's server stream receiving the client's next
// message (a client or bidirectional stream), and a net/http handler
// reading its request body (the goroutine that set the deadline, parked in
// the server connection's reader; over HTTP/2, in the request body's read
// of net/http's server, of Go 1.27's net/http/internal/http2, or of
// golang.org/x/net/http2's).
var inboundReads = []string{"google.golang.org/grpc.(*serverStream).RecvMsg", "net/http.(*connReader).Read",
	"net/http.(*http2requestBody).Read", "net/http/internal/http2.(*requestBody).Read", "golang.org/x/net/http2.(*requestBody).Read"}

// slowClient turns a slow_peer verdict into slow_client when every waiter
// bound at the expiry was a server waiting to read from its client: the
// healthy connection it waited on is the inbound one, and what did not
// come in time is the client's request, not an answer. So does a tlp
// verdict there: a tail loss probe of the server's own sends (a delayed
// ACK fires one: the first of several streams to expire together sends its
// status, the probe comes before the others expire) says nothing of what
// the client sent. Other trouble on that connection keeps its class (a
// zero window, an RTO of the server's own sends), and so does a server
// waiting on an upstream (an outbound connection, slow_peer).
func slowClient(cause *Cause, d *event.Deadline, cands []*evidence) {
	if (cause.Class != ClassSlowPeer && cause.Class != ClassTLP) || !inboundReading(d) {
		return
	}
	was := cause.Summary
	if cause.Class == ClassTLP {
		peer := "the client"
		for _, w := range d.Waiters {
			if p := peerOf(w.Conn, cands); w.Conn != 0 && p != "" {
				peer = p
			}
		}
		cause.Summary = peer + " did not send its request before the deadline"
		cause.Note = joinNote(cause.Note, "the server's own sends on the connection needed a tail loss probe ("+was+"): no cause of the client's silence")
	} else {
		cause.Summary = strings.Replace(was, " did not answer ", " did not send its request ", 1)
		if cause.Summary == was {
			cause.Summary = "the client did not send its request in time: " + was
		}
	}
	cause.Class = ClassSlowClient
	cause.Summary += "; the server was waiting to read it (" + waitFrames(d) + ")"
	cause.Note = joinNote(cause.Note, "the server waited to read from its client at the expiry: the client, not an answer, was late")
}

// inboundReading is whether every waiter of d bound at the expiry (at
// least one) was a server waiting to read from its client.
func inboundReading(d *event.Deadline) bool {
	n := 0
	for _, w := range d.Waiters {
		if w.Conn == 0 {
			continue
		}
		if !slices.Contains(inboundReads, w.ConnFrame) {
			return false
		}
		n++
	}
	return n > 0
}
