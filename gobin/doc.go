// Package gobin analyses Go executables for the uprobe side of the tracer:
// it finds a process's executable, reads its Go version and modules, resolves
// function addresses (from .symtab, or from .gopclntab when stripped) and
// their file offsets for uprobe attachment, disassembles functions to find
// RETs, call sites and the end of the stack-check prologue, locates the
// context deadline probe points, resolves struct field offsets (DWARF, else
// the layouts measured per Go release and module version, gobin/layouts,
// docs/layouts.md) and symbolizes PCs into logical frames,
// expanding inlined calls.
//
// gobin only reads files. It must not need root, load or attach BPF programs,
// import cilium/ebpf, or read the memory of a running process: everything it
// answers comes from the executable file, so it can be tested anywhere.
package gobin
