package gobin

import (
	"fmt"
	"slices"
	"strings"
)

// Function names net/http's Client.Timeout timer is found with.
const (
	fnSetRequestCancel = "net/http.setRequestCancel"
	fnCloseChan        = "runtime.closechan"
)

// typeAsserts are the runtime functions an interface-to-interface type
// assertion with a comma-ok result calls: runtime.typeAssert (its cache
// miss, Go 1.22+), runtime.assertI2I2 (Go 1.21), runtime.assertE2I2 (older
// releases), runtime.getitab (what both of the older ones call, inlined).
var typeAsserts = []string{"runtime.typeAssert", "runtime.assertI2I2", "runtime.assertE2I2", "runtime.getitab"}

// ClientTimeoutCancel finds net/http's doCancel: the closure
// setRequestCancel builds when a Client.Timeout applies to a RoundTripper
// that is not net/http's own (a wrapper, golang.org/x/net/http2's
// transport). Such a request has two timers for one deadline: its
// context's (WithDeadline) and one setRequestCancel arms itself, whose
// goroutine calls doCancel when it fires; doCancel closes Request.Cancel,
// which wakes the round trip, and the client then cancels the context,
// often before the context's own timer has fired. doCancel runs only when
// that timer fires or the program closes the request's own Cancel
// channel: never on a request that ends in time.
//
// It is found by what it does, not by its closure number: of
// setRequestCancel's closures, the one that closes a channel
// (runtime.closechan) and then asserts the RoundTripper to the legacy
// canceler interface (a comma-ok assertion to an interface; see
// typeAsserts). The other closure that closes a channel (stopTimer's)
// asserts nothing. Anything but exactly one match is an error: no probe
// rather than a wrong one. Its closure's context register holds the
// captured channel, RoundTripper and *Request, which the probe finds by
// their values (the request's Cancel field is the channel), not by offset.
func (b *Binary) ClientTimeoutCancel() (Func, error) {
	closechan, err := b.Func(fnCloseChan)
	if err != nil {
		return Func{}, fmt.Errorf("find net/http's Client.Timeout cancel: %w", err)
	}
	var asserts []Func
	for _, name := range typeAsserts {
		if fn, err := b.Func(name); err == nil {
			asserts = append(asserts, fn)
		}
	}
	if _, err := b.Func(fnSetRequestCancel); err != nil {
		return Func{}, fmt.Errorf("find net/http's Client.Timeout cancel: %w", err)
	}
	closures, err := b.Funcs(fnSetRequestCancel + ".func")
	if err != nil {
		return Func{}, fmt.Errorf("find net/http's Client.Timeout cancel: %w", err)
	}
	var found []Func
	var closers []string
	for _, fn := range closures {
		insts, err := b.disassemble(fn)
		if err != nil {
			return Func{}, fmt.Errorf("find net/http's Client.Timeout cancel: %w", err)
		}
		closes, asserted := false, false
		for _, i := range insts {
			if i.kind != kindCall {
				continue
			}
			if i.target == closechan.Entry {
				closes = true
			}
			if closes && slices.ContainsFunc(asserts, func(a Func) bool { return a.Entry == i.target }) {
				asserted = true
			}
		}
		if closes {
			closers = append(closers, fn.Name)
		}
		if closes && asserted {
			found = append(found, fn)
		}
	}
	if len(found) != 1 {
		return Func{}, fmt.Errorf("find net/http's Client.Timeout cancel: %d closures of %s close a channel and assert a type (of %d that close one: %s): %w",
			len(found), fnSetRequestCancel, len(closers), strings.Join(closers, ", "), ErrNotFound)
	}
	return found[0], nil
}
