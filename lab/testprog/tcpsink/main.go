// Command tcpsink is a test peer for the fault lab: it accepts on -addr and
// discards everything it reads, each connection on its own goroutine.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	fmt.Println("listening", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "accept:", err)
			os.Exit(3)
		}
		go func() {
			defer c.Close()
			io.Copy(io.Discard, c)
		}()
	}
}
