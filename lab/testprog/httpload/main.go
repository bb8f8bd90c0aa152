// Command httpload is a traced service for overhead benchmarks: an HTTP
// server and a client in one process, the client sending requests at
// saturation, each under its own context.WithTimeout that is met. For each
// line "run DURATION" on stdin it runs the load for that long and prints
// "requests CPU_NANOSECONDS" (user+system time of the whole process, where
// uprobe traps are charged). With -rate it sends that many requests per
// second instead (steady traffic, the node agent's benchmark).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func cpu() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	workers := flag.Int("workers", 8, "concurrent clients")
	timeout := flag.Duration("timeout", time.Second, "per-request timeout (met)")
	rate := flag.Float64("rate", 0, "requests per second of the whole process (0: saturation)")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	url := "http://" + ln.Addr().String() + "/"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *workers}}

	fmt.Println("ready", os.Getpid())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		arg, ok := strings.CutPrefix(sc.Text(), "run ")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var n atomic.Int64
		var wg sync.WaitGroup
		c0 := cpu()
		end := time.Now().Add(d)
		for i := 0; i < *workers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var pace <-chan time.Time
				if *rate > 0 {
					t := time.NewTicker(time.Duration(float64(*workers) / *rate * float64(time.Second)))
					defer t.Stop()
					pace = t.C
				}
				for time.Now().Before(end) {
					if pace != nil {
						<-pace
					}
					ctx, cancel := context.WithTimeout(context.Background(), *timeout)
					req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
					resp, err := client.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						n.Add(1)
					}
					cancel()
				}
			}()
		}
		wg.Wait()
		fmt.Println(n.Load(), cpu()-c0)
	}
}
