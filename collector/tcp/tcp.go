package tcp

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
)

// Config tunes the collector.
type Config struct {
	// PID restricts events to sockets owned by this process (tgid); 0 traces all.
	PID uint32
	// Lifecycle adds connect/established/close events.
	Lifecycle bool
	// RingBufferBytes is the ring buffer size, a power of two multiple of the
	// page size; 0 means 4 MiB.
	RingBufferBytes uint32
	// RateBurst caps retransmit-class events per socket per second; 0 means 64.
	RateBurst uint32
	// PollInterval bounds how long an event may wait in the ring buffer when
	// wakeups are batched; 0 means 100 ms.
	PollInterval time.Duration
	// ActivityInterval turns on activity events: per socket at most one per
	// interval, plus one whenever another goroutine does the I/O. 0: off.
	ActivityInterval time.Duration
	// ForceRawTP uses raw_tp programs even where tp_btf works (tests, kernel matrix).
	ForceRawTP bool
	// ReceiveAlways keeps the receive hook (sock_recv_length) attached for
	// the collector's whole life. By default, where the send hook
	// (sock_send_length) records owners, the receive hook is attached only
	// while some process is registered with RegisterGoProcess (its detail
	// tier is on): it ran 4 times per HTTP request (2 of them failed reads)
	// for what the send hook mostly records anyway. Without it, a socket
	// is attributed on its first send, so a receive-only socket (or an
	// accepted one before its first answer) stays unowned until then.
	ReceiveAlways bool
	// Logger receives warnings; nil discards them.
	Logger *slog.Logger
	// tap, if set, sees every raw sample before it is decoded (tests
	// capture real kernel records for the fuzz corpora with it).
	tap func(raw []byte)
}

// Stats are the collector's counters, summed over CPUs.
type Stats struct {
	Emitted     uint64 // events the kernel wrote to the ring buffer
	Lost        uint64 // events dropped because the ring buffer was full
	RateLimited uint64 // events suppressed by the per-socket rate limit
	SocksFull   uint64 // sockets not tracked because the socket table was full
	// SocksStale counts socket table entries left by a freed socket and
	// found, by the cookie of the socket now at their address, before
	// they could lend it the old one's identity.
	SocksStale   uint64
	OwnerHits    uint64 // process-context hook runs (send, receive, connect)
	DecodeErrors uint64 // samples userspace could not decode
	// Missed counts hook runs the kernel skipped: a program's tracepoint
	// fired on a CPU where the same program was already running (a
	// softirq interrupting it; the kernel's recursion guard). Their events,
	// if any, are lost.
	Missed uint64
}

// Collector collects kernel TCP events. Create it with Start; Close it once.
type Collector struct {
	log    *slog.Logger
	clk    collector.Clock
	maps   tcpMaps
	progs  []*ebpf.Program
	tps    []string // the tracepoint of progs[i]
	links  []link.Link
	hooks  []HookStatus
	reader *collector.Ring
	events chan event.TCP
	done   chan struct{}
	wg     sync.WaitGroup
	tap    func(raw []byte)

	decodeErrors uint64
	goMu         sync.Mutex
	goPids       map[uint32]bool // registered in go_pids
	// The receive hook when it is attached on demand (see
	// Config.ReceiveAlways): recvAt indexes progs/tps/links, links[recvAt]
	// is nil while detached. -1: always attached, or absent.
	recvAt    int
	recvTyped bool
	closed    bool // under goMu: Close ran
	mu        sync.Mutex
	closeOnce sync.Once
	closeErr  error
}

// ErrRequiredHook is wrapped when a hook the collector cannot work without
// fails to attach.
var ErrRequiredHook = errors.New("required tracepoint not attached")

// Start loads the TCP programs, attaches every hook this kernel offers and
// starts reading events. On error nothing is left attached.
func Start(cfg Config) (_ *Collector, err error) {
	cfg.Logger = collector.Logger(cfg.Logger)
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if err := collector.Setup(cfg.Logger); err != nil {
		return nil, err
	}
	hz, err := collector.KernelHZ()
	if err != nil {
		hz = 250
		cfg.Logger.Warn("kernel HZ unknown, assuming 250: rto values may be off", "err", err)
	}

	c := &Collector{
		recvAt: -1,
		log:    cfg.Logger,
		clk:    collector.NewClock(hz),
		events: make(chan event.TCP, 4096),
		done:   make(chan struct{}),
		tap:    cfg.tap,
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	spec, err := loadTcp()
	if err != nil {
		return nil, fmt.Errorf("load tcp BPF spec: %w", err)
	}
	var specs tcpSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("load tcp BPF spec: %w", err)
	}
	if err := configure(&specs, cfg); err != nil {
		return nil, err
	}
	// The maps first, alone: each program is then loaded on its own
	// against them (attachAll), so one a kernel refuses spares the others.
	if err := spec.LoadAndAssign(&c.maps, nil); err != nil {
		return nil, fmt.Errorf("create maps: %w", collector.Explain(err))
	}
	if err := c.attachAll(spec, hooks(&specs.tcpProgramSpecs), cfg.ForceRawTP); err != nil {
		return nil, err
	}
	if !cfg.ReceiveAlways {
		if err := c.receiveOnDemand(); err != nil {
			return nil, err
		}
	}
	c.reader, err = collector.NewRing(c.maps.Events)
	if err != nil {
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	c.wg.Add(1)
	go c.read(cfg.PollInterval)
	if cfg.ActivityInterval > 0 {
		if err := c.maps.ActEpoch.Put(uint32(0), uint64(1)); err != nil {
			return nil, fmt.Errorf("start the activity epoch: %w", err)
		}
		c.wg.Add(1)
		go c.epochs(cfg.ActivityInterval)
	}
	return c, nil
}

// configure sets the programs' constants and the ring buffer's size.
func configure(specs *tcpSpecs, cfg Config) error {
	if cfg.RingBufferBytes != 0 {
		specs.Events.MaxEntries = cfg.RingBufferBytes
	}
	burst := cfg.RateBurst
	if burst == 0 {
		burst = 64
	}
	timerAddr, err := collector.KallsymsAddr("tcp_write_timer")
	switch {
	case err != nil:
		cfg.Logger.Warn("zero-window events off: cannot read /proc/kallsyms", "err", err)
	case timerAddr == 0:
		cfg.Logger.Warn("zero-window events off: tcp_write_timer has no address in /proc/kallsyms (addresses are hidden without CAP_SYSLOG under kernel.kptr_restrict)")
	}
	hasErr, err := tracepointHasArgs("tcp_retransmit_skb", 3)
	if err != nil {
		cfg.Logger.Debug("cannot inspect tcp_retransmit_skb prototype", "err", err)
	}
	for _, v := range []struct {
		name string // for the error
		spec *ebpf.VariableSpec
		val  any
	}{
		{"target_tgid", specs.TargetTgid, cfg.PID},
		{"emit_lifecycle", specs.EmitLifecycle, cfg.Lifecycle},
		{"has_retransmit_err", specs.HasRetransmitErr, hasErr},
		{"tcp_write_timer_addr", specs.TcpWriteTimerAddr, timerAddr},
		{"rate_burst", specs.RateBurst, burst},
		{"activity_interval_ns", specs.ActivityIntervalNs, uint64(cfg.ActivityInterval)},
	} {
		if err := v.spec.Set(v.val); err != nil {
			return fmt.Errorf("configure tcp BPF %s: %w", v.name, err)
		}
	}
	return nil
}

// tracepointHasArgs reports whether the tracepoint's prototype in kernel BTF
// has at least n arguments (not counting the leading context pointer).
func tracepointHasArgs(tp string, n int) (bool, error) {
	kspec, err := btf.LoadKernelSpec()
	if err != nil {
		return false, err
	}
	var td *btf.Typedef
	if err := kspec.TypeByName("btf_trace_"+tp, &td); err != nil {
		return false, err
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return false, fmt.Errorf("btf_trace_%s is not a pointer", tp)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return false, fmt.Errorf("btf_trace_%s is not a function pointer", tp)
	}
	return len(proto.Params)-1 >= n, nil
}

func (c *Collector) read(poll time.Duration) {
	defer c.wg.Done()
	defer close(c.events)
	c.reader.Consume(poll, c.log, func(raw []byte) bool {
		if c.tap != nil {
			c.tap(raw)
		}
		var ev event.TCP
		if err := Decode(raw, c.clk, &ev); err != nil {
			c.mu.Lock()
			c.decodeErrors++
			c.mu.Unlock()
			c.log.Warn("drop undecodable event", "err", err)
			return true
		}
		select {
		case c.events <- ev:
			return true
		case <-c.done:
			return false
		}
	})
}

// Events delivers decoded events in the order the ring buffer holds them.
// It is closed after Close. A slow consumer makes the kernel drop events,
// which Stats counts as Lost.
func (c *Collector) Events() <-chan event.TCP { return c.events }

// Hooks reports how each tracepoint was attached.
func (c *Collector) Hooks() []HookStatus { return c.hooks }

// HZ returns the kernel tick rate used to convert RTOs.
func (c *Collector) HZ() uint32 { return c.clk.HZ }

// Stats sums the kernel's per-CPU counters.
func (c *Collector) Stats() (Stats, error) {
	var s Stats
	// Under goMu: Close releases the maps and programs under it.
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed {
		return s, errors.New("read stats: collector closed")
	}
	if err := collector.Counters(c.maps.Stats, &s.Emitted, &s.Lost, &s.RateLimited, &s.SocksFull, &s.OwnerHits, &s.SocksStale); err != nil {
		return s, fmt.Errorf("read stats: %w", err)
	}
	c.mu.Lock()
	s.DecodeErrors = c.decodeErrors
	c.mu.Unlock()
	var err error
	if s.Missed, err = collector.Missed(c.progs...); err != nil {
		return s, fmt.Errorf("read program stats: %w", err)
	}
	return s, nil
}

// Close detaches everything, in this order: stop the reader (closing the
// ring buffer unblocks it; a done channel alone would not), wait for it,
// close links, then programs and maps. Safe to call more than once.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		var errs []error
		if c.reader != nil {
			errs = append(errs, c.reader.Close())
			c.wg.Wait()
		} else {
			close(c.events)
		}
		// Under goMu: a RegisterGoProcess racing with Close must not
		// attach the receive hook again after its link was closed.
		c.goMu.Lock()
		c.closed = true
		for _, l := range c.links {
			if l != nil {
				errs = append(errs, l.Close())
			}
		}
		for _, p := range c.progs {
			errs = append(errs, p.Close())
		}
		errs = append(errs, c.maps.Close())
		c.goMu.Unlock()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// ProgramStat is the kernel's run count and cumulative run time of one
// attached program (counted only while collector.EnableRunStats is in
// effect).
type ProgramStat struct {
	Runs    uint64
	Runtime time.Duration
}

// ProgramStats returns the run statistics of each attached program, by
// tracepoint.
func (c *Collector) ProgramStats() (map[string]ProgramStat, error) {
	out := map[string]ProgramStat{}
	for i, p := range c.progs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("read stats of %s: %w", c.tps[i], err)
		}
		out[c.tps[i]] = ProgramStat{Runs: st.RunCount, Runtime: st.Runtime}
	}
	return out, nil
}

// Progress is the monotonic time before which every kernel event has been
// sent on Events (the merge's watermark for this source; 0 before the
// first read).
func (c *Collector) Progress() uint64 { return c.reader.Progress() }

// Kick makes the reader look at its ring now instead of at its next poll.
func (c *Collector) Kick() { c.reader.Kick() }
