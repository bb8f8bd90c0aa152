package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Where the client opens its span, relative to the request's deadline.
const (
	// spanBefore starts a span, then sets the deadline under the span's
	// context.
	spanBefore = "before"
	// spanInside sets the deadline from context.Background(); only the
	// instrumented transport starts a client span, inside the call.
	spanInside = "inside"
	// spanNone uses no OTel at all.
	spanNone = "none"
	// spanMixed takes turns, by sequence number: before, inside, then none
	// (an uninstrumented transport of its own, so no span at all and no
	// traceparent sent).
	spanMixed = "mixed"
)

// clientConfig holds the client subcommand's flags.
type clientConfig struct {
	proto       string
	target      string
	path        string
	n           int
	concurrency int
	timeout     time.Duration
	span        string
	otel        bool
	traceparent string
	wait        bool
	localWait   time.Duration
	retry       bool
	siblings    int
	bodyStall   time.Duration
	burn        int
	ballastMB   int
	garbageKB   int
	gogc        int
	stwBlock    time.Duration
	reqBytes    int
	transport   string
	clientTO    time.Duration // http.Client.Timeout
	tls         bool
	http1       bool
}

// bind registers the client flags on fs.
func (c *clientConfig) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.proto, "proto", "http", "protocol: http|grpc|grpc-stall|dial (dial: net.Dialer.DialContext under the deadline, cancelled as soon as it returns; grpc-stall: open the server's reflection stream and send nothing, a client that does not send its request)")
	fs.StringVar(&c.target, "target", "127.0.0.1:8080", "server address host:port; several, comma-separated, are used in turn (request i goes to target i mod n)")
	fs.BoolVar(&c.retry, "retry", false, "retry a failed call every 50 ms until the deadline (a reset or refused connect then ends in a timeout)")
	fs.DurationVar(&c.localWait, "local-wait", 0,
		"before each call, wait for a token of a local semaphore that one goroutine refills every this long: a deadline can expire in the wait, with no network I/O (0: no semaphore)")
	fs.DurationVar(&c.bodyStall, "body-stall", 0,
		"with -req-bytes: stop the upload halfway for this long (or until the request's context ends): a client that stalls its request")
	fs.IntVar(&c.siblings, "siblings", 0,
		"open this many contexts under each request's deadline before its call, each watched by a goroutine until the call returns "+
			"(as grpc-go's stream watchers are): the call's own context is then not the deadline's first child")
	fs.IntVar(&c.burn, "burn", 0, "CPU-burning sidecar goroutines that spin for the whole run (with a CPU quota: throttling)")
	fs.IntVar(&c.ballastMB, "ballast-mb", 0, "keep a live pointer-heavy heap of this many MiB (with a small GOGC: long GC cycles)")
	fs.IntVar(&c.garbageKB, "garbage-kb", 0, "allocate this many KiB of short-lived pointer-holding objects per request, under its deadline")
	fs.IntVar(&c.gogc, "gogc", 0, "set the GC percentage (debug.SetGCPercent) before the ballast is made; 0 leaves GOGC alone")
	fs.DurationVar(&c.stwBlock, "stw-block", 0,
		"hold a processor in an assembly loop the runtime cannot preempt for this long at a time, 1 ms apart: every stop of the world (GC) waits for it (0: none)")
	fs.StringVar(&c.path, "path", "/work", "HTTP path")
	fs.IntVar(&c.n, "n", 1, "number of requests")
	fs.IntVar(&c.reqBytes, "req-bytes", 0,
		"HTTP: POST a body of this many bytes (a bulk upload: loss on the link makes the client's socket retransmit)")
	fs.IntVar(&c.concurrency, "concurrency", 1, "concurrent workers")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "per-request context.WithTimeout; 0 for no deadline")
	fs.StringVar(&c.span, "span", spanBefore,
		"where the client span opens: before (span, then deadline under it)|inside (deadline, then the transport's span inside the call)|none (no OTel)|mixed (request i: before, inside, none by i mod 3)")
	fs.BoolVar(&c.otel, "otel", true,
		"instrument the transport with otelhttp/otelgrpc (required by -span=inside; ignored by -span=none)")
	fs.StringVar(&c.traceparent, "traceparent", "",
		"send this fixed traceparent (00-<trace>-<span>-01) with no OTel on the client; implies -span=none")
	fs.BoolVar(&c.wait, "wait", false, `after printing "ready PID", wait for a line on stdin before sending`)
	fs.BoolVar(&c.tls, "tls", false,
		"TLS to the server (its certificate is not verified): HTTPS, HTTP/2 by ALPN unless -http1; gRPC with credentials.NewTLS")
	fs.BoolVar(&c.http1, "http1", false, "with -tls -proto http: HTTP/1.1 over TLS only (no HTTP/2)")
	fs.DurationVar(&c.clientTO, "client-timeout", 0,
		"-proto http: http.Client.Timeout (net/http makes the request's deadline from it; over the -otel transport, not net/http's own, it also arms a timer of its own); combine with -timeout 0")
	fs.StringVar(&c.transport, "transport", "plain",
		"HTTP transport: plain (an http.Transport with no dialer settings)|default (a clone of http.DefaultTransport: its dialer has its own 30 s deadline between the request's and the dial)")
}

// check validates the flags; explicit lists the flags set on the command
// line.
func (c *clientConfig) check(explicit map[string]bool) error {
	switch c.proto {
	case "http", "grpc", "grpc-stall", "dial":
	default:
		return fmt.Errorf("-proto %q: want http, grpc, grpc-stall or dial", c.proto)
	}
	switch c.span {
	case spanBefore, spanInside, spanNone, spanMixed:
	default:
		return fmt.Errorf("-span %q: want before, inside, none or mixed", c.span)
	}
	switch c.transport {
	case "", "plain", "default":
	default:
		return fmt.Errorf("-transport %q: want plain or default", c.transport)
	}
	if c.burn < 0 || c.ballastMB < 0 || c.garbageKB < 0 {
		return fmt.Errorf("-burn %d -ballast-mb %d -garbage-kb %d: want >= 0", c.burn, c.ballastMB, c.garbageKB)
	}
	if c.stwBlock < 0 || c.stwBlock > 0 && spinPreemptible {
		return fmt.Errorf("-stw-block %v: want >= 0, on amd64 or arm64 (elsewhere the loop is preemptible)", c.stwBlock)
	}
	if c.reqBytes < 0 || c.reqBytes > 0 && c.proto != "http" {
		return fmt.Errorf("-req-bytes %d: want >= 0, with -proto http", c.reqBytes)
	}
	if c.tls && c.proto == "dial" || c.http1 && (!c.tls || c.proto != "http") {
		return fmt.Errorf("-tls %v -http1 %v -proto %s: -tls takes http or grpc, -http1 takes -tls -proto http", c.tls, c.http1, c.proto)
	}
	if c.n < 0 || c.concurrency < 1 {
		return fmt.Errorf("-n %d -concurrency %d: want n >= 0 and concurrency >= 1", c.n, c.concurrency)
	}
	if c.traceparent != "" {
		if _, _, err := parseTraceparent(c.traceparent); err != nil {
			return fmt.Errorf("-traceparent: %w", err)
		}
		if explicit["span"] && c.span != spanNone {
			return fmt.Errorf("-traceparent sends without OTel: it cannot go with -span=%s", c.span)
		}
		c.span = spanNone
	}
	if c.span == spanNone {
		c.otel = false
	}
	if (c.span == spanInside || c.span == spanMixed) && !c.otel {
		return fmt.Errorf("-span=%s needs -otel: the transport starts the span", c.span)
	}
	return nil
}

// caller sends one request of the lab's protocol.
type caller interface {
	call(ctx context.Context) error
	close() error
}

// runClient is the client subcommand: it sends -n requests from
// -concurrency workers and logs a clientLine per request and a summaryLine
// at the end. It stops sending early when ctx ends.
func runClient(ctx context.Context, args []string, stdin io.Reader, out *lineWriter) error {
	var cfg clientConfig
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	cfg.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if err := cfg.check(explicit); err != nil {
		return err
	}

	var tel *telemetry
	if cfg.span != spanNone {
		tel = newTelemetry()
		defer tel.shutdown(context.Background())
	}
	var callers, plain []caller
	for _, target := range strings.Split(cfg.target, ",") {
		for _, instrumented := range []bool{true, false} {
			if !instrumented && cfg.span != spanMixed {
				break
			}
			tcfg := cfg
			tcfg.target = target
			tcfg.otel = cfg.otel && instrumented
			var (
				c   caller
				err error
			)
			if cfg.proto == "http" {
				c = newHTTPCaller(tcfg, tel)
			} else if cfg.proto == "dial" {
				c = dialCaller{target: target}
			} else if c, err = newGRPCCaller(tcfg, tel); err != nil {
				return err
			}
			defer c.close()
			if instrumented {
				callers = append(callers, c)
			} else {
				plain = append(plain, c)
			}
		}
	}

	if cfg.gogc > 0 {
		debug.SetGCPercent(cfg.gogc)
	}
	if cfg.ballastMB > 0 {
		makeBallast(cfg.ballastMB)
	}
	if err := out.line(fmt.Sprintf("ready %d", os.Getpid())); err != nil {
		return err
	}
	if cfg.wait {
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("wait for a line on stdin: %w", err)
		}
	}

	burn(ctx, cfg.burn)
	if cfg.stwBlock > 0 {
		stwBlock(ctx, cfg.stwBlock)
	}
	r := &requester{cfg: cfg, callers: callers, plain: plain, targets: strings.Split(cfg.target, ",")}
	if cfg.localWait > 0 {
		r.sem = make(chan struct{})
		go func() {
			t := time.NewTicker(cfg.localWait)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					select {
					case r.sem <- struct{}{}:
					default: // nobody waiting: the token is not kept
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	if cfg.span == spanBefore || cfg.span == spanMixed {
		r.tracer = tel.tracer()
	}
	if cfg.traceparent != "" {
		r.fixedTrace, r.fixedParent, _ = parseTraceparent(cfg.traceparent)
	}
	sum := r.run(ctx, out)
	return out.json(sum)
}

// requester sends the requests and logs them.
type requester struct {
	cfg     clientConfig
	callers []caller
	plain   []caller // -span=mixed: the uninstrumented callers, for "none"
	targets []string
	sem     chan struct{} // -local-wait: the local semaphore
	tracer  trace.Tracer
	// fixedTrace and fixedParent are the IDs of -traceparent.
	fixedTrace, fixedParent string
}

// run sends cfg.n requests from cfg.concurrency workers.
func (r *requester) run(ctx context.Context, out *lineWriter) summaryLine {
	seqs := make(chan int)
	go func() {
		defer close(seqs)
		for i := range r.cfg.n {
			select {
			case seqs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	var (
		mu  sync.Mutex
		sum = summaryLine{Summary: true}
		wg  sync.WaitGroup
	)
	for range r.cfg.concurrency {
		wg.Go(func() {
			for seq := range seqs {
				line := r.one(seq)
				if err := out.json(line); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
				mu.Lock()
				switch line.Outcome {
				case outcomeOK:
					sum.OK++
				case outcomeDeadlineExceeded:
					sum.DeadlineExceeded++
				case outcomeRemoteDeadline:
					sum.RemoteDeadlineExceeded++
				default:
					sum.Error++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sum
}

// one sends request seq. With -span=before the deadline's context descends
// from the span's; otherwise it descends from context.Background() alone.
func (r *requester) one(seq int) clientLine {
	line := clientLine{Side: "client", Proto: r.cfg.proto, Seq: seq}
	ctx := context.Background()
	span, callers := r.cfg.span, r.callers
	if span == spanMixed {
		span = []string{spanBefore, spanInside, spanNone}[seq%3]
		if span == spanNone {
			callers = r.plain
		}
		line.Span = span
	}
	if span == spanBefore {
		var span trace.Span
		ctx, span = r.tracer.Start(ctx, "client-request")
		defer span.End()
		sc := span.SpanContext()
		line.TraceID, line.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}

	start := time.Now()
	if r.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.timeout)
		defer cancel()
		dl, _ := ctx.Deadline()
		line.Deadline = deadlineText(dl)
	}
	for range r.cfg.siblings {
		sib, stop := context.WithCancel(ctx)
		defer stop()
		go func() { <-sib.Done() }()
	}
	ctx, cs := withCallSpan(ctx)
	line.Target = r.targets[seq%len(r.targets)]
	var err error
	if r.sem != nil {
		select {
		case <-r.sem:
		case <-ctx.Done():
			err = ctx.Err() // the deadline expired in the local wait
		}
	}
	if err == nil && r.cfg.garbageKB > 0 {
		garbage(r.cfg.garbageKB)
	}
	if err == nil {
		err = callers[seq%len(callers)].call(ctx)
		for r.cfg.retry && err != nil && ctx.Err() == nil {
			select {
			case <-time.After(50 * time.Millisecond):
				err = callers[seq%len(callers)].call(ctx)
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
	}
	line.DurationMS = millis(time.Since(start))
	line.Outcome, line.Error = clientOutcome(ctx, err), errorText(err)
	if r.cfg.proto == "dial" && err != nil {
		// A dial's socket deadline (set from the context) fires with the
		// context's timer: whichever the runtime runs first, the deadline
		// is what ended the dial. Not waiting for the timer, as a program
		// that cancels on return does not.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			line.Outcome = outcomeDeadlineExceeded
		}
	}

	if sc := cs.spanContext(); sc.IsValid() {
		line.TraceID, line.CallSpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	if r.fixedTrace != "" {
		line.TraceID, line.CallSpanID = r.fixedTrace, r.fixedParent
	}
	return line
}

// clientOutcome classifies a call's error. deadline_exceeded means the
// client's own deadline fired (its context says so): the ground truth for a
// tracer of the client. A gRPC DeadlineExceeded status that arrived while
// the client's own deadline had not fired yet (the server's copy of the
// deadline, sent as grpc-timeout, expired first) is remote_deadline_exceeded.
func clientOutcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
		if _, ok := ctx.Deadline(); !ok {
			return outcomeDeadlineExceeded // the HTTP client's own (-client-timeout)
		}
		// gRPC may notice a deadline from the clock before the context's
		// own timer fires: once the deadline has passed, let the timer
		// fire (nothing cancels the context before this returns), so the
		// log says whether the client's own deadline expired.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return outcomeDeadlineExceeded
		}
		return outcomeRemoteDeadline
	default:
		return outcomeError
	}
}

// dialCaller connects under the request's context and closes at once:
// net.Dialer.DialContext with the context's deadline as the socket's.
type dialCaller struct{ target string }

func (d dialCaller) call(ctx context.Context) error {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", d.target)
	if err != nil {
		return err
	}
	return c.Close()
}

func (dialCaller) close() error { return nil }
