module github.com/timeout-tracer/tracer

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/spf13/cobra v1.10.2
	golang.org/x/arch v0.33.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
