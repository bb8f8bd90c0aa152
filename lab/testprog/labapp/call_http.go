package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// httpCaller sends GET requests to one URL.
type httpCaller struct {
	client      *http.Client
	url         string
	traceparent string
	body        []byte // POSTed when not empty (-req-bytes)
	bodyStall   time.Duration
}

// stallReader is a request body that stops halfway for stall (or until
// ctx ends): an upload that stalls on the client's side.
type stallReader struct {
	ctx     context.Context
	b       []byte
	off     int
	stall   time.Duration
	stalled bool
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.off >= len(s.b) {
		return 0, io.EOF
	}
	end := len(s.b)
	if !s.stalled {
		if s.off >= len(s.b)/2 {
			s.stalled = true
			t := time.NewTimer(s.stall)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.ctx.Done():
				return 0, s.ctx.Err()
			}
		} else {
			end = len(s.b) / 2
		}
	}
	n := copy(p, s.b[s.off:end])
	s.off += n
	return n, nil
}

// newHTTPCaller builds the client. Its transport never uses a proxy, so
// requests stay in the lab's namespaces whatever the environment says; with
// OTel it is otelhttp.NewTransport over a captureTransport.
func newHTTPCaller(cfg clientConfig, tel *telemetry) *httpCaller {
	base := &http.Transport{
		MaxIdleConns:        cfg.concurrency,
		MaxIdleConnsPerHost: cfg.concurrency,
	}
	if cfg.transport == "default" {
		base = http.DefaultTransport.(*http.Transport).Clone()
		base.Proxy = nil
		base.MaxIdleConns, base.MaxIdleConnsPerHost = cfg.concurrency, cfg.concurrency
	}
	if cfg.tls {
		// As a service calling an internal endpoint: HTTP/2 when the
		// server offers it (ForceAttemptHTTP2, as http.DefaultTransport),
		// or HTTP/1.1 only (an empty TLSNextProto).
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		base.ForceAttemptHTTP2 = !cfg.http1
		if cfg.http1 {
			base.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
	}
	var rt http.RoundTripper = base
	if cfg.otel {
		rt = otelhttp.NewTransport(captureTransport{next: base},
			otelhttp.WithTracerProvider(tel.provider), otelhttp.WithPropagators(tel.propagator))
	}
	url := cfg.target
	if !strings.Contains(url, "://") {
		url = "http://" + url
		if cfg.tls {
			url = "https://" + cfg.target
		}
	}
	return &httpCaller{
		client:      &http.Client{Transport: rt, Timeout: cfg.clientTO},
		url:         url + cfg.path,
		traceparent: cfg.traceparent,
		body:        make([]byte, cfg.reqBytes),
		bodyStall:   cfg.bodyStall,
	}
}

// call sends one request and reads the whole answer; a status other than
// 200 is an error.
func (c *httpCaller) call(ctx context.Context) error {
	method, body := http.MethodGet, io.Reader(nil)
	if len(c.body) > 0 {
		method, body = http.MethodPost, bytes.NewReader(c.body)
		if c.bodyStall > 0 {
			body = &stallReader{ctx: ctx, b: c.body, stall: c.bodyStall}
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.ContentLength = int64(len(c.body))
	if c.traceparent != "" {
		req.Header.Set("traceparent", c.traceparent)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// close drops idle connections.
func (c *httpCaller) close() error {
	c.client.CloseIdleConnections()
	return nil
}
