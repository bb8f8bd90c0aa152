// Package export turns events and reports into what people and tools read:
// table and JSON lines for the CLI (and later OTLP spans and Prometheus
// metrics). It works on plain values from package event and must not import
// cilium/ebpf, so it is tested without root.
package export
