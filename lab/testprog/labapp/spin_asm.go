//go:build amd64 || arm64

package main

// spin runs n iterations of an assembly loop that the runtime cannot
// preempt (spin_$GOARCH.s).
//
//go:noescape
func spin(n uint64)

const spinPreemptible = false
