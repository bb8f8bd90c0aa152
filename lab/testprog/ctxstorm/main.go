// Command ctxstorm is the target of the context storm test: workers set
// short deadlines and let them expire as fast as they can for -storm, then
// a calm phase expires -after more deadlines, -every apart (recovery). It
// counts its own expiries per phase and prints them as one JSON line, the
// ground truth a tracer's accounting must match.
//
// It waits for a line on stdin before the storm, so the tracer can attach
// first, and for another before the calm phase, so a test can let the
// tracer settle in between. Each phase ends with a JSON line of its count.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	workers := flag.Int("workers", 256, "goroutines expiring deadlines during the storm")
	budget := flag.Duration("budget", time.Millisecond, "budget of each storm deadline")
	stormFor := flag.Duration("storm", 5*time.Second, "how long the storm lasts")
	after := flag.Int("after", 5, "deadlines expired in the calm phase after the storm")
	every := flag.Duration("every", 300*time.Millisecond, "pause between calm-phase deadlines")
	linger := flag.Duration("linger", 0, "stay alive this long at the end")
	flag.Parse()

	fmt.Println("ready", os.Getpid())
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')

	var storm atomic.Int64
	stop := time.Now().Add(*stormFor)
	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), *budget)
				<-ctx.Done()
				cancel()
				storm.Add(1)
			}
		}()
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(map[string]any{"storm": storm.Load(), "rate": float64(storm.Load()) / stormFor.Seconds()})
	in.ReadString('\n')
	calm := 0
	for i := 0; i < *after; i++ {
		time.Sleep(*every)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		<-ctx.Done()
		cancel()
		calm++
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"calm": calm})
	time.Sleep(*linger)
}
