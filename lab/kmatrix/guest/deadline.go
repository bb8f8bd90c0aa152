package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/collector/goprobe"
	"github.com/timeout-tracer/tracer/event"
)

// targetCounts is what the deadlines target counts itself: the ground
// truth the tracer's count must equal.
type targetCounts struct {
	Expired    int   `json:"expired"`
	AtCreation int   `json:"at_creation"`
	Met        int   `json:"met"`
	HTTP       int   `json:"http"`      // http.Client timeouts among Expired
	HTTPFDs    []int `json:"http_fds"`  // their connections' descriptors
	PoolWait   int   `json:"pool_wait"` // requests expired in net/http's pool, their dial in SYN retries
	Dial       int   `json:"dial"`      // dials expired in SYN retries, cancelled as they returned
	// DialSocketFirst: of those, the ones whose socket deadline fired
	// before the context's timer (the dial returned "i/o timeout").
	DialSocketFirst int `json:"dial_socket_first"`
	// DialerTimeout: of Dial, those under net.Dialer's Timeout (the
	// budget), in a context of no deadline.
	DialerTimeout int `json:"dialer_timeout"`
}

// createdRE is a creator as the deadlines target's own code sets it, and
// where its goroutines wait (waiting_at).
var createdRE = regexp.MustCompile(`^main\.\w+ \(.*deadlines/main\.go:\d+\)$`)

// checkDeadlines runs the deadlines target (its http.Client timeouts
// against its own slow server on lo) with the cold probes attached, and
// with detail also the detail probes, and compares the tracer's expiries
// with the target's own count. An HTTP timeout's waiting request is bound
// at the expiry to its connection, read from the round trip's frame (the
// spill slot's place differs between amd64 and arm64): the descriptor must
// be the one the target's request was sent on.
func checkDeadlines(ctx context.Context, cfg config, detail bool) (string, error) {
	tgt := exec.Command(cfg.prog("deadlines"), "-rounds", fmt.Sprint(cfg.rounds), "-budget", cfg.budget.String(), "-pool-wait", "-dial")
	stdin, err := tgt.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := tgt.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	tgt.Stderr = &stderr
	started := time.Now()
	if err := tgt.Start(); err != nil {
		return "", fmt.Errorf("start deadlines: %w", err)
	}
	defer func() {
		tgt.Process.Kill()
		tgt.Wait()
	}()
	br := bufio.NewReader(stdout)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		return "", fmt.Errorf("target not ready: %q %v: %s", line, err, stderr.String())
	}

	p, err := goprobe.Start(goprobe.Config{PID: tgt.Process.Pid, PollInterval: 20 * time.Millisecond})
	if err != nil {
		return "", err
	}
	defer p.Close()
	if detail {
		if err := p.SetDetail(true); err != nil {
			return "", fmt.Errorf("attach detail probes: %w", err)
		}
	}

	counts := make(chan targetCounts, 1)
	go func() {
		var c targetCounts
		rest, _ := io.ReadAll(br)
		if err := json.Unmarshal(rest, &c); err != nil {
			c.Expired = -1
		}
		counts <- c
	}()
	io.WriteString(stdin, "go\n")

	var evs []event.Deadline
	var want *targetCounts
	var settle <-chan time.Time // after the target's count: late events, then any surplus
	timeout := time.After(60 * time.Second)
collect:
	for {
		select {
		case ev, ok := <-p.Events():
			if !ok {
				break collect
			}
			evs = append(evs, ev)
			if want != nil && len(evs) == want.Expired {
				settle = time.After(300 * time.Millisecond)
			}
		case c := <-counts:
			if c.Expired < 0 {
				return "", fmt.Errorf("target printed no counts: %s", stderr.String())
			}
			want = &c
			settle = time.After(3 * time.Second)
			if len(evs) >= c.Expired {
				settle = time.After(300 * time.Millisecond)
			}
		case <-settle:
			break collect
		case <-timeout:
			return "", fmt.Errorf("target did not finish within 60s: %d expiries seen", len(evs))
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if want == nil {
		return "", errors.New("probe event channel closed before the target finished")
	}
	st, _ := p.Stats()
	return verifyDeadlines(evs, *want, tgt.Process.Pid, detail, st, cfg, started)
}

// dialOf reports whether e is the expiry of one of the target's own dials
// (main.dialDeadline, deeper than the 12 frames read): waiting in connect,
// and no waiter in net/http (a pool wait's request parks in getConn, its
// dial under net/http's dialConn).
func dialOf(e event.Deadline) bool {
	if !strings.HasPrefix(e.WaitingAt, "net.(*netFD).connect") {
		return false
	}
	for _, w := range e.Waiters {
		for _, f := range w.Stack {
			if strings.HasPrefix(f, "net/http.") {
				return false
			}
		}
	}
	return true
}

func verifyDeadlines(evs []event.Deadline, want targetCounts, pid int, detail bool, st goprobe.Stats, cfg config, started time.Time) (string, error) {
	at, withDetail := 0, 0
	var budgets []string
	for _, e := range evs {
		if e.Kind == event.ExpiredAtCreation {
			at++
		}
		if e.Detail {
			withDetail++
		}
	}
	msg := fmt.Sprintf("target: %d expired (%d at creation), %d met; tracer: %d expiries (%d at creation), %d with detail; probe hits: cold %d, entry %d, return %d",
		want.Expired, want.AtCreation, want.Met, len(evs), at, withDetail, st.ExpiryHits, st.CreateHits, st.ReturnHits)
	var errs []error
	if len(evs) != want.Expired {
		errs = append(errs, fmt.Errorf("tracer saw %d expiries, the target counted %d", len(evs), want.Expired))
	}
	if at != want.AtCreation {
		errs = append(errs, fmt.Errorf("%d expired-at-creation events, target counted %d", at, want.AtCreation))
	}
	for _, e := range evs {
		if int(e.PID) != pid {
			errs = append(errs, fmt.Errorf("event of pid %d, want %d", e.PID, pid))
			break
		}
		// The process's start, read by the expiry probe (the task's
		// start_time, CO-RE) on the event's clock: when it was started
		// here, give or take the fork.
		if d := e.ProcStart.Sub(started); e.ProcStart.IsZero() || d < -time.Second || d > time.Second {
			errs = append(errs, fmt.Errorf("process start read at the expiry %v, %v from when it was started (%v)", e.ProcStart, d, started))
			break
		}
	}
	// Who waited, read by the cold tier at the expiry (g.sched and the
	// frame pointers, on each architecture): a fired timer's goroutine
	// waits on its Done, or a child's, in main. One already past when set
	// has no waiter yet.
	waiting, bound, httpWaited, poolWaited, poolBound := 0, 0, 0, 0, 0
	dialWaited, dialBound, dialAtSocket, dialerBudget := 0, 0, 0, 0
	for _, e := range evs {
		if e.Kind != event.TimerFired || e.Cancelled {
			continue // already past when set, or cancelled first (http.Client.Timeout): nobody waits
		}
		// A dial of the target's own (dialDeadline), cancelled as it
		// returns: found in connect's frame from the socket deadline's
		// timer when that fired first (the frame's locals lie below its
		// frame pointer on amd64, above on arm64), else among the
		// context's children; bound to its socket either way.
		if dialOf(e) {
			dialWaited++
			if e.DialTimer {
				dialAtSocket++
			}
			// Under net.Dialer's Timeout: its budget read at the expiry
			// from DialContext's frame (read past the frames kept; its
			// deferred cancel's slot differs by architecture).
			if e.SetBudgetFrom == "dialer_timeout" {
				dialerBudget++
				if e.SetBudget != cfg.budget {
					errs = append(errs, fmt.Errorf("a dial's budget %v from dialer_timeout, want %v", e.SetBudget, cfg.budget))
				}
			}
			for _, w := range e.Waiters {
				if strings.HasPrefix(w.ConnFrame, "net.(*netFD).connect") && w.ConnFD >= 0 {
					dialBound++
					break
				}
			}
			waiting++
			continue
		}
		// A request in net/http's pool whose dial is in SYN retries: the
		// dial, on another goroutine under the wantConn's context, found
		// from getConn's frame (its scan differs by architecture: the
		// frame's locals lie below its frame pointer on amd64, above on
		// arm64) and bound through connect's wait.
		if strings.HasPrefix(e.WaitingAt, "net.(*netFD).connect") || strings.HasPrefix(e.WaitingAt, "net/http.(*Transport).getConn") {
			poolWaited++
			for _, w := range e.Waiters {
				if strings.HasPrefix(w.ConnFrame, "net.(*netFD).connect") && w.ConnFD >= 0 {
					poolBound++
					break
				}
			}
			waiting++
			continue
		}
		if strings.HasPrefix(e.WaitingAt, "net/http.") {
			httpWaited++
			if !strings.HasPrefix(e.WaitingAt, "net/http.(*persistConn).roundTrip") {
				errs = append(errs, fmt.Errorf("an HTTP timeout's waiting_at %q, want net/http.(*persistConn).roundTrip", e.WaitingAt))
				break
			}
			var fds []int32
			var sentAgo time.Duration
			for _, w := range e.Waiters {
				if w.ConnFrame != "" {
					fds = append(fds, w.ConnFD)
					sentAgo = max(sentAgo, w.ConnSentAgo)
				}
			}
			// The socket's send timestamp (lsndtime, CO-RE) in the
			// kernel's ticks, HZ derived from jiffies and the clock: the
			// request went out within the budget before the expiry.
			if sentAgo <= 0 || sentAgo > 2*time.Second {
				errs = append(errs, fmt.Errorf("an HTTP timeout's connection last sent %v before the expiry, want within the budget", sentAgo))
				break
			}
			if len(fds) == 0 || !slices.Contains(want.HTTPFDs, int(fds[0])) {
				errs = append(errs, fmt.Errorf("an HTTP timeout bound at the expiry to descriptors %v, want one of the target's %v", fds, want.HTTPFDs))
				break
			}
			// Its budget, Client.Timeout (the target's -budget), read
			// from the waiter's (*Client).send frame: its receiver and
			// request's spill slots, on each architecture.
			if e.SetBudget != cfg.budget || e.SetBudgetFrom != "client_timeout" {
				errs = append(errs, fmt.Errorf("an HTTP timeout's budget read at the expiry %v from %q, want %v from client_timeout", e.SetBudget, e.SetBudgetFrom, cfg.budget))
				break
			}
			bound++
			waiting++
			continue
		}
		if !createdRE.MatchString(e.WaitingAt) {
			errs = append(errs, fmt.Errorf("waiting_at %q (waiters %d), want a main.* function in deadlines/main.go", e.WaitingAt, len(e.Waiters)))
			break
		}
		waiting++
	}
	msg += fmt.Sprintf("; %d of %d pool waits bound to their dial (%d waiting there)", poolBound, want.PoolWait, poolWaited)
	msg += fmt.Sprintf("; %d of %d dials bound (%d reports, %d seen at the socket deadline; the target saw it first %d times)", dialBound, want.Dial, dialWaited, dialAtSocket, want.DialSocketFirst)
	msg += fmt.Sprintf("; %d of %d dials under net.Dialer's Timeout with it as their budget", dialerBudget, want.DialerTimeout)
	if dialerBudget != want.DialerTimeout || want.DialerTimeout == 0 {
		errs = append(errs, fmt.Errorf("%d of %d dials under net.Dialer's Timeout read it as their budget at the expiry", dialerBudget, want.DialerTimeout))
	}
	if dialBound != want.Dial {
		errs = append(errs, fmt.Errorf("%d of %d dials that timed out bound at the expiry to their socket (%d reports of them, %d at the socket deadline; the socket's fired first %d times)", dialBound, want.Dial, dialWaited, dialAtSocket, want.DialSocketFirst))
	}
	if poolBound != want.PoolWait {
		errs = append(errs, fmt.Errorf("%d of %d requests expired in net/http's pool bound at the expiry to their dial (%d reports waiting there)", poolBound, want.PoolWait, poolWaited))
	}
	msg += fmt.Sprintf("; waiting_at on %d fired timers; %d of %d HTTP timeouts bound at the expiry to the target's connection, with their Client.Timeout; net/http's doCancel probe: %d runs, %d second timers merged",
		waiting, bound, want.HTTP, st.ClientTimerHits, st.Merged)
	// Every one bound, the wrapped client's too (its Client.Timeout arms
	// a timer of its own beside the context's, which used to cancel the
	// context first now and then: no waiter read); the doCancel probe,
	// whose closure read differs by architecture, must have run.
	if want.HTTP > 0 && bound != want.HTTP && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%d of %d HTTP timeouts bound at the expiry (%d waited in net/http)", bound, want.HTTP, httpWaited))
	}
	if want.HTTP > 0 && st.ClientTimerHits == 0 {
		errs = append(errs, errors.New("net/http's doCancel probe never ran (the target's wrapped client timed out)"))
	}
	if !detail {
		if withDetail != 0 || st.CreateHits != 0 {
			errs = append(errs, fmt.Errorf("detail fields without detail probes (%d events, %d entry hits)", withDetail, st.CreateHits))
		}
		return msg, errors.Join(errs...)
	}
	for _, e := range evs {
		b, ok := e.Budget()
		if !ok {
			errs = append(errs, fmt.Errorf("%s expiry without detail", e.Kind))
			break
		}
		wantB := cfg.budget
		if e.Kind == event.ExpiredAtCreation {
			wantB = -time.Second
		}
		if d := b - wantB; d < -cfg.budgetSlack || d > cfg.budgetSlack {
			errs = append(errs, fmt.Errorf("budget %v, want %v ±%v (%s)", b, wantB, cfg.budgetSlack, e.CreatedAt))
			break
		}
		if !createdRE.MatchString(e.CreatedAt) && !strings.HasPrefix(e.CreatedAt, "net/http.") && !strings.HasPrefix(e.CreatedAt, "net.(*Dialer).") {
			errs = append(errs, fmt.Errorf("created_at %q, want a main.* function in deadlines/main.go (or net/http's, for an http.Client timeout; net.Dialer's, for a dial under its Timeout)", e.CreatedAt))
			break
		}
		if len(budgets) < 4 {
			budgets = append(budgets, fmt.Sprintf("%.1fms@%s", float64(b.Microseconds())/1000, strings.Fields(e.CreatedAt)[0]))
		}
	}
	msg += "; e.g. " + strings.Join(budgets, " ")
	return msg, errors.Join(errs...)
}
