package correlate

import (
	"fmt"
	"time"
)

// Config sets the correlator's windows and caps. Zero fields take the
// defaults; negative ones are an error.
type Config struct {
	// Grace is how long after an expiry the correlator waits for kernel
	// events before it reports: an RTO that fires with the deadline's timer
	// is evidence of loss before it. Default 250ms.
	Grace time.Duration
	// Lookback is the window searched before an expiry when the deadline's
	// creation was not seen. Default 10s.
	Lookback time.Duration
	// Slack widens a known window before its creation, for clocks read at
	// slightly different points. Default 50ms.
	Slack time.Duration
	// ActivityResolution is the activity producer's interval: one sample
	// vouches for possible I/O until this long after it. Default 1s.
	ActivityResolution time.Duration
	// IdleTimeout drops sockets, goroutines and processes without events for
	// this long. Default 2m.
	IdleTimeout time.Duration
	// CloseWindow is how soon after an expiry a connection the process
	// closes counts as the expiring call's: a cancelled call's connection
	// is closed with it (net/http's HTTP/1 transport, database drivers),
	// within a millisecond or so. Without a binding, the candidates closed
	// this soon are looked at first. Default 50ms; at most Grace.
	CloseWindow time.Duration
	// ClosedLinger keeps a closed socket this long, so a deadline expiring
	// later whose window covers the close still finds it. Default: Lookback.
	ClosedLinger time.Duration

	// LocalLookback is the window local time lost is summed over when a
	// deadline's creation was not seen (its budget is then unknown too).
	// Default 1s.
	LocalLookback time.Duration
	// LocalShare is the share of the context's life (creation to expiry,
	// else the LocalLookback window) a local cause must have taken for its class to replace a mild network class,
	// slow_peer, local or unknown. Default 0.3; must be in (0, 1].
	LocalShare float64
	// LocalOverPeer is the share a local figure needs to name the class of
	// a timeout whose network verdict is slow_peer (the peer silent from
	// the request to the expiry): a majority of the life.
	LocalOverPeer float64

	MaxSockets              int // live sockets; default 16384
	MaxEventsPerSocket      int // TCP events kept per socket; default 64
	MaxActivityPerSocket    int // activity intervals kept per socket; default 8
	MaxGoroutines           int // goroutines with bindings; default 16384
	MaxBindingsPerGoroutine int // bindings kept per goroutine; default 16 (a goroutine making call after call fills them within the grace window)
	MaxProcesses            int // processes; default 4096
	MaxPending              int // deadlines waiting for their grace window; default 4096
	MaxReportConnections    int // connections listed in one report (all count for its class); default 16
	MaxReportEvents         int // TCP events listed per connection in a report (the newest); default 16
	MaxLocalPerProcess      int // local intervals kept per process and kind; default 1024
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Grace:                   250 * time.Millisecond,
		Lookback:                10 * time.Second,
		Slack:                   50 * time.Millisecond,
		CloseWindow:             50 * time.Millisecond,
		ActivityResolution:      time.Second,
		IdleTimeout:             2 * time.Minute,
		MaxSockets:              16384,
		MaxEventsPerSocket:      64,
		MaxActivityPerSocket:    8,
		MaxGoroutines:           16384,
		MaxBindingsPerGoroutine: 16,
		MaxProcesses:            4096,
		MaxPending:              4096,
		MaxReportConnections:    16,
		MaxReportEvents:         16,
		LocalLookback:           time.Second,
		LocalShare:              0.3,
		LocalOverPeer:           0.5,
		MaxLocalPerProcess:      1024,
	}
}

// withDefaults fills zero fields and rejects negative ones.
func (c Config) withDefaults() (Config, error) {
	def := DefaultConfig()
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Grace", &c.Grace, def.Grace},
		{"Lookback", &c.Lookback, def.Lookback},
		{"Slack", &c.Slack, def.Slack},
		{"CloseWindow", &c.CloseWindow, def.CloseWindow},
		{"ActivityResolution", &c.ActivityResolution, def.ActivityResolution},
		{"IdleTimeout", &c.IdleTimeout, def.IdleTimeout},
		{"ClosedLinger", &c.ClosedLinger, 0}, // 0: Lookback, filled in below
		{"LocalLookback", &c.LocalLookback, def.LocalLookback},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("correlator config: %s is negative (%v)", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.ClosedLinger == 0 {
		c.ClosedLinger = c.Lookback
	}
	c.CloseWindow = min(c.CloseWindow, c.Grace)
	for _, n := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxSockets", &c.MaxSockets, def.MaxSockets},
		{"MaxEventsPerSocket", &c.MaxEventsPerSocket, def.MaxEventsPerSocket},
		{"MaxActivityPerSocket", &c.MaxActivityPerSocket, def.MaxActivityPerSocket},
		{"MaxGoroutines", &c.MaxGoroutines, def.MaxGoroutines},
		{"MaxBindingsPerGoroutine", &c.MaxBindingsPerGoroutine, def.MaxBindingsPerGoroutine},
		{"MaxProcesses", &c.MaxProcesses, def.MaxProcesses},
		{"MaxPending", &c.MaxPending, def.MaxPending},
		{"MaxReportConnections", &c.MaxReportConnections, def.MaxReportConnections},
		{"MaxReportEvents", &c.MaxReportEvents, def.MaxReportEvents},
		{"MaxLocalPerProcess", &c.MaxLocalPerProcess, def.MaxLocalPerProcess},
	} {
		if *n.v < 0 {
			return c, fmt.Errorf("correlator config: %s is negative (%d)", n.name, *n.v)
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	switch {
	case c.LocalShare == 0:
		c.LocalShare = def.LocalShare
	case !(c.LocalShare > 0 && c.LocalShare <= 1): // also NaN
		return c, fmt.Errorf("correlator config: LocalShare %v is not in (0, 1]", c.LocalShare)
	}
	switch {
	case c.LocalOverPeer == 0:
		c.LocalOverPeer = def.LocalOverPeer
	case !(c.LocalOverPeer > 0 && c.LocalOverPeer <= 1):
		return c, fmt.Errorf("correlator config: LocalOverPeer %v is not in (0, 1]", c.LocalOverPeer)
	}
	return c, nil
}
