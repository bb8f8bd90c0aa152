// Command connstorm is a load generator for storm tests: -workers goroutines
// connect to -addr (a port nobody listens on) as fast as they can for
// -duration, so the kernel reports a reset and a failed connect each time.
// It prints the number of attempts.
package main

import (
	"flag"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "", "address ip:port with no listener")
	workers := flag.Int("workers", 8, "concurrent dialers")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	flag.Parse()

	var attempts atomic.Int64
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if c, err := net.DialTimeout("tcp", *addr, time.Second); err == nil {
					c.Close()
				}
				attempts.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Println(attempts.Load())
}
