// Package export turns events and reports into what people and tools read:
// table and JSON lines for the CLI, OTLP spans inside each request's own
// trace (OTLP), and Prometheus metrics (Metrics). The exporters never block
// the pipeline that feeds them: what does not fit in their bounded queues
// is dropped and counted. It works on plain values from packages event and
// correlate and must not import cilium/ebpf, so it is tested without root.
package export
