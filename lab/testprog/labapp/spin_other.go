//go:build !amd64 && !arm64

package main

// spin on other architectures is a Go loop: preemptible, so -stw-block
// blocks nothing there.
func spin(n uint64) {
	x := uint64(1)
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink.Store(x)
}

const spinPreemptible = true
