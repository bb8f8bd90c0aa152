package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Server serves /metrics (and, for the node agent, /healthz and /readyz)
// over plain HTTP.
type Server struct {
	srv    *http.Server
	mux    *http.ServeMux
	addr   net.Addr
	served chan struct{}
	ready  atomic.Bool
}

// Serve listens on addr and serves m at /metrics until Close.
func Serve(addr string, m *Metrics, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr: %w", err)
	}
	s := &Server{mux: http.NewServeMux(), addr: ln.Addr(), served: make(chan struct{})}
	s.mux.Handle("/metrics", m.Handler())
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve /metrics", "err", err)
		}
	}()
	return s, nil
}

// Addr is where it listens (the port chosen for ":0").
func (s *Server) Addr() net.Addr { return s.addr }

// Health adds /healthz (the process answers) and /readyz (ok once Ready
// was called: the kernel collectors are attached).
func (s *Server) Health() {
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: the kernel collectors are not attached yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
}

// Ready makes /readyz answer ok.
func (s *Server) Ready() { s.ready.Store(true) }

// Close keeps serving for linger (a last scrape sees the final counts),
// then stops, waiting at most a second for scrapes in flight.
func (s *Server) Close(linger time.Duration) {
	if linger > 0 {
		time.Sleep(linger)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = s.srv.Shutdown(ctx)
	cancel()
	<-s.served
}
