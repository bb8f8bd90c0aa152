// Command pingpong is the traced process of the send/receive hook cost
// benchmark: one goroutine writes a byte on one end of a loopback TCP
// connection and reads it at the other, where it already is (no parking,
// no scheduler: one send and one receive system call an iteration). For
// each line "run DURATION" on stdin it loops that long and prints
// "iterations CPU_NANOSECONDS" (user+system time of the process, where the
// kernel hooks run). -workers is accepted and ignored (the benchmarks'
// launcher passes it).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

func cpu() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	flag.Int("workers", 1, "ignored")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		acc <- c
	}()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r := <-acc
	ln.Close()
	buf := make([]byte, 1)
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
		c0, t0 := cpu(), time.Now()
		var n int64
		for time.Since(t0) < d {
			for i := 0; i < 256; i++ {
				if _, err := w.Write(buf); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				if _, err := io.ReadFull(r, buf); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
			n += 256
		}
		fmt.Println(n, cpu()-c0)
	}
}
