// Package collector is what every probe family shares: the preflight
// (privileges, BTF), the setup before loading (memlock), the facts of the
// running kernel (HZ, kallsyms), the clock that turns kernel timestamps
// into wall time, the ring buffer reader and the small helpers for typed
// BPF objects. The families live in the subpackages: tcp (kernel TCP
// tracepoints), goprobe (Go uprobes: deadlines, calls, dials, gRPC), sched
// (run-queue delay, GC pauses), proc (execs and exits) and enrich (the
// optional fentry/kprobe enrichment); check answers `tracer check`.
//
// The collectors are the only packages that import cilium/ebpf. They emit
// the plain types of package event and import nothing of the pipeline,
// the exporters or the labs.
package collector
