// Command tcpclient is a test peer for the fault lab: it connects to -addr,
// prints "connected LOCAL" once the handshake is done, then writes -size bytes
// every -every until -duration ends or a write fails. Tests run it in a
// network namespace so that a socket's owner is a process other than the
// tracer's.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	addr := flag.String("addr", "", "server address ip:port")
	size := flag.Int("size", 512, "bytes per write")
	every := flag.Duration("every", 100*time.Millisecond, "time between writes")
	duration := flag.Duration("duration", 30*time.Second, "stop after this long")
	flag.Parse()

	conn, err := net.DialTimeout("tcp", *addr, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(2)
	}
	fmt.Println("connected", conn.LocalAddr())
	buf := make([]byte, *size)
	end := time.Now().Add(*duration)
	for time.Now().Before(end) {
		conn.SetWriteDeadline(time.Now().Add(*duration))
		if _, err := conn.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(3)
		}
		time.Sleep(*every)
	}
}
