// Package record stores the correlator's input, the typed event stream, in a
// file, so that a live run can be replayed without root and the correlator
// tested on real recordings with golden outputs.
//
// The format is JSON lines. The first line is a header:
//
//	{"format":"timeout-tracer-events","version":1,"host":"node-7","started":"2026-11-29T17:31:02.118Z"}
//
// then one object per event, tagged by "type" ("tcp", "deadline",
// "activity", "binding"), with every field of the event. Zero fields are
// left out; durations are Go duration strings ("204ms"), times RFC 3339 with
// nanoseconds, TCP kinds and states their names ("rto", "ESTABLISHED").
// Readers ignore fields they do not know, so fields may be added within a
// version; a change of meaning takes a new version.
//
// The package is plain Go on package event: it must not import cilium/ebpf,
// and the Reader must never panic on any input (it is fuzzed).
package record
