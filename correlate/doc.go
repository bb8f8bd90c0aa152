// Package correlate joins kernel TCP events with Go context deadlines: for
// every deadline that expired it says what the network did to that request
// meanwhile (RTO backoff, SYN retries, resets, refused connects, zero
// windows, fast retransmits, tail loss probes), or that the connection was
// healthy and the peer slow, or that the request did no network I/O at all
// — and how sure it is.
//
// It is driven by one time-ordered stream of event.Any (ordered by
// CLOCK_MONOTONIC): TCP events by socket cookie, coarse socket activity,
// goroutine→socket bindings and expired deadlines. A Correlator keeps
// bounded state (sockets with their recent TCP events and activity,
// goroutines with their bindings, processes with their sockets), and emits
// one Report per deadline once the stream's time has passed the expiry plus
// a grace window, so kernel events that fire with or just after the expiry
// still count.
//
// What it must not do: import cilium/ebpf (even indirectly: everything here
// runs and is tested without root, on recorded streams); read clocks or
// depend on map order (the same input gives byte-identical reports); grow
// without bound (every table has a cap, and every eviction is counted in
// Stats); and give a network cause to a timeout whose own connections show
// no trouble. The rules that guarantee the last point are in classify.go.
package correlate
