// Command deadlines is a target for the Go deadline probes: it runs rounds of
// contexts with timeouts — some expire, some are met, nested both ways, some
// already past at creation — and prints its own count of expiries, the ground
// truth a tracer's count must equal.
//
// It waits for a line on stdin before starting, so the tracer can attach
// first. The lines marked "created:" are where each expiring deadline is set;
// tests find them by that marker.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"syscall"
	"time"
)

type counts struct {
	Expired    int `json:"expired"`     // contexts whose own deadline fired
	AtCreation int `json:"at_creation"` // of which already past when created
	Met        int `json:"met"`         // deadlines met in time (cancelled)
	HTTP       int `json:"http"`        // http.Client timeouts among Expired
	// HTTPFDs are the descriptors of the connections the timed-out
	// requests were sent on (httptrace's GotConn): what a tracer reading
	// the waiting request's connection at the expiry must find.
	HTTPFDs []int `json:"http_fds,omitempty"`
	// PoolWait: requests that expired waiting in net/http's pool for a
	// dial in SYN retries (-pool-wait), among Expired.
	PoolWait int `json:"pool_wait,omitempty"`
	// Dial: dials under a deadline to a peer that drops their SYNs
	// (-dial), cancelled the moment they return, among Expired;
	// DialSocketFirst of them returned "i/o timeout" (the socket's write
	// deadline, set from the context's, fired before the context's timer).
	Dial            int `json:"dial,omitempty"`
	DialSocketFirst int `json:"dial_socket_first,omitempty"`
	// DialerTimeout: of Dial, those made with net.Dialer's Timeout (the
	// budget) under a context without a deadline: the deadline is the one
	// DialContext made from Timeout.
	DialerTimeout int `json:"dialer_timeout,omitempty"`
}

var c counts

// expire sets a short deadline and waits it out.
func expire(budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget) // created:expire
	defer cancel()
	<-ctx.Done()
	c.Expired++
}

// meet sets a generous deadline and finishes well within it.
func meet() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	time.Sleep(time.Millisecond)
	cancel()
	<-ctx.Done()
	c.Met++
}

// outerShort: the outer deadline fires and takes the inner context down
// (the inner asks for a later deadline, so it is a plain cancel context).
func outerShort(budget time.Duration) {
	outer, cancel := context.WithTimeout(context.Background(), budget) // created:outerShort
	defer cancel()
	inner, cancel2 := context.WithTimeout(outer, 5*time.Second)
	defer cancel2()
	<-inner.Done()
	c.Expired++
}

// innerShort: the inner deadline fires; the outer one is met.
func innerShort(budget time.Duration) {
	outer, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	inner, cancel2 := context.WithTimeout(outer, budget) // created:innerShort
	<-inner.Done()
	cancel2()
	c.Expired++
	cancel()
	c.Met++
}

// alreadyPast asks for a deadline in the past: it expires at creation.
func alreadyPast() {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second)) // created:alreadyPast
	defer cancel()
	<-ctx.Done()
	c.Expired++
	c.AtCreation++
}

// wrapper is a RoundTripper of the program's own around net/http's (as an
// instrumented client's): net/http's Client.Timeout then arms a timer of
// its own beside the request context's deadline (setRequestCancel), and
// either may fire first.
type wrapper struct{ next http.RoundTripper }

func (w wrapper) RoundTrip(r *http.Request) (*http.Response, error) { return w.next.RoundTrip(r) }

// httpTimeout calls a slow server with http.Client.Timeout.
func httpTimeout(client *http.Client, url string) {
	fd := -1
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if tc, ok := info.Conn.(*net.TCPConn); ok {
			if rc, err := tc.SyscallConn(); err == nil {
				rc.Control(func(d uintptr) { fd = int(d) })
			}
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	if err != nil {
		panic(err)
	}
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
		return
	}
	c.Expired++
	c.HTTP++
	c.HTTPFDs = append(c.HTTPFDs, fd)
}

// fullListener listens with an accept queue of one and fills it, so that
// every later SYN to it is dropped: a connect there waits in SYN retries,
// as to a blackholed peer, with no network namespace. It returns the
// address and what to close.
func fullListener() (string, func()) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		panic(err)
	}
	sa := &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := syscall.Bind(fd, sa); err != nil {
		panic(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		panic(err)
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		panic(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", got.(*syscall.SockaddrInet4).Port)
	filler, err := net.DialTimeout("tcp", addr, time.Second) // the one the queue holds
	if err != nil {
		panic(err)
	}
	return addr, func() { filler.Close(); syscall.Close(fd) }
}

// poolWait sends a request under a deadline to a peer that drops its SYNs:
// the request waits in net/http's pool (getConn) while another goroutine
// dials under the wantConn's context, and the deadline expires there.
func poolWait(client *http.Client, url string, budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget) // created:poolWait
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		panic(err)
	}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		return
	}
	c.Expired++
	c.PoolWait++
}

// dialDeadline dials a peer that drops its SYNs under a deadline and
// cancels the moment the dial returns, as a one-shot program exits: when
// the socket's write deadline fires before the context's timer, the
// cancel stops that timer.
func dialDeadline(addr string, budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget) // created:dialDeadline
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		c.DialSocketFirst++
	}
	dialEnded(conn, err)
}

// dialerTimeout dials the same peer with net.Dialer's Timeout under a
// context of no deadline, cancelled as the dial returns.
func dialerTimeout(addr string, budget time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	d := net.Dialer{Timeout: budget}
	conn, err := d.DialContext(ctx, "tcp", addr)
	cancel()
	if err != nil {
		c.DialerTimeout++
	}
	dialEnded(conn, err)
}

func dialEnded(conn net.Conn, err error) {
	if err == nil {
		conn.Close()
		return
	}
	c.Expired++
	c.Dial++
}

func main() {
	rounds := flag.Int("rounds", 5, "rounds of every scenario")
	budget := flag.Duration("budget", 30*time.Millisecond, "budget of the expiring deadlines")
	withHTTP := flag.Bool("http", true, "include http.Client timeouts")
	withWrapped := flag.Bool("wrapped", true, "with -http: also an http.Client timeout over a RoundTripper of the program's own (two timers)")
	withPoolWait := flag.Bool("pool-wait", false, "also a request whose deadline expires while it waits in net/http's pool for a dial in SYN retries")
	withDial := flag.Bool("dial", false, "also a dial under a deadline to a peer that drops its SYNs, cancelled as it returns, and one under net.Dialer's Timeout")
	pause := flag.Duration("pause", 0, "sleep between rounds")
	wait := flag.Bool("wait", true, "wait for a line on stdin before starting")
	linger := flag.Duration("linger", 0, "stay alive this long after the rounds (a quiet period)")
	flag.Parse()

	var url string
	client := &http.Client{Timeout: *budget}
	wrapped := &http.Client{Timeout: *budget, Transport: wrapper{http.DefaultTransport}}
	if *withHTTP {
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}))
		defer slow.Close()
		url = slow.URL
	}
	var poolURL string
	poolClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var fullAddr string
	if *withPoolWait || *withDial {
		addr, closeFull := fullListener()
		defer closeFull()
		poolURL, fullAddr = "http://"+addr+"/", addr
	}
	fmt.Println("ready", os.Getpid())
	if *wait {
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	for i := 0; i < *rounds; i++ {
		expire(*budget)
		meet()
		outerShort(*budget)
		innerShort(*budget)
		alreadyPast()
		if *withHTTP {
			httpTimeout(client, url)
			if *withWrapped {
				httpTimeout(wrapped, url)
			}
		}
		if *withPoolWait {
			poolWait(poolClient, poolURL, *budget)
		}
		if *withDial {
			dialDeadline(fullAddr, *budget)
			dialerTimeout(fullAddr, *budget)
		}
		time.Sleep(*pause)
	}
	json.NewEncoder(os.Stdout).Encode(c)
	time.Sleep(*linger)
}
