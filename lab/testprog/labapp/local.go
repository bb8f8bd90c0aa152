package main

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// sink keeps the burners' results observable, so the compiler keeps the loop.
var sink atomic.Uint64

// Local trouble the client can make for itself, for the tracer's local
// causes: CPU-burning sidecar goroutines (with a CPU quota on the cgroup:
// throttling) and a large pointer-heavy heap kept live while each request
// allocates (with a tiny GOGC: back-to-back GC cycles).

// burn spins n goroutines until ctx ends.
func burn(ctx context.Context, n int) {
	for range n {
		go func() {
			x := uint64(1)
			for i := 0; ; i++ {
				x = x*6364136223846793005 + 1442695040888963407
				if i&0xfffff == 0 && ctx.Err() != nil {
					sink.Store(x)
					return
				}
			}
		}()
	}
}

// node is one element of the ballast: pointers for the GC to trace.
type node struct {
	next  *node
	left  *node
	value [4]uint64
}

// ballast is the live pointer-heavy heap; it stays reachable for the
// process's life.
var ballast []*node

// makeBallast allocates about mb MiB of linked nodes.
func makeBallast(mb int) {
	n := mb << 20 / 48
	ballast = make([]*node, 0, n)
	var prev *node
	for i := range n {
		nd := &node{next: prev}
		if i > 0 {
			nd.left = ballast[i/2]
		}
		ballast = append(ballast, nd)
		prev = nd
	}
}

// garbage allocates kb KiB of short-lived pointer-holding objects, so that
// requests drive the GC.
func garbage(kb int) {
	var head *node
	for range kb << 10 / 48 {
		head = &node{next: head}
	}
	runtime.KeepAlive(head)
}

// stwBlock holds a processor in an assembly loop the runtime cannot
// preempt, for d at a time with a millisecond's pause between, until ctx
// ends: every stop of the world (two per GC cycle) waits for the loop to
// end, as it waits for a long assembly routine (a hash or a copy over a
// large buffer) in real programs. The loop's speed is measured first.
func stwBlock(ctx context.Context, d time.Duration) {
	const probe = 1 << 24
	t0 := time.Now()
	spin(probe)
	took := max(time.Since(t0), time.Microsecond)
	n := uint64(float64(probe) * float64(d) / float64(took))
	go func() {
		for ctx.Err() == nil {
			spin(n)
			time.Sleep(time.Millisecond)
		}
	}()
}
