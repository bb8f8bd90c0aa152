package enrich

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/event"
)

// ErrUnavailable is wrapped when this kernel lets neither fentry nor
// kprobes attach: the enrichment is optional and the tracer works without.
var ErrUnavailable = errors.New("optional enrichment not available on this kernel")

// Config tunes the optional enrichment.
type Config struct {
	// ForceKprobe skips fentry (tests, kernel matrix: both paths).
	ForceKprobe bool
	// PollInterval bounds how long an event waits; 0 means 100 ms.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Stats are the enrichment's counters, summed over CPUs.
type Stats struct {
	Hits, Emitted, Lost uint64
}

// Collector reports every tail loss probe the kernel sends
// (tcp_send_loss_probe) as an event.TCP of kind tlp, with the socket's
// 4-tuple and snapshot; the cookie is set with fentry only, and the owner
// is never known here (the TCP collector has it).
type Collector struct {
	log    *slog.Logger
	clk    collector.Clock
	maps   enrichMaps
	prog   *ebpf.Program // fentry_loss_probe or kprobe_loss_probe
	link   link.Link
	via    string
	reader *collector.Ring
	events chan event.TCP
	wg     sync.WaitGroup

	mu           sync.Mutex
	decodeErrors uint64
	closeOnce    sync.Once
	closeErr     error
}

// Start attaches the enrichment with fentry, else with a kprobe. When
// neither works the error wraps ErrUnavailable and says why for each;
// nothing is left attached.
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
	}
	e := &Collector{log: cfg.Logger, clk: collector.NewClock(hz), events: make(chan event.TCP, 1024)}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	spec, err := loadEnrich()
	if err != nil {
		return nil, fmt.Errorf("load enrichment BPF spec: %w", err)
	}
	var specs enrichSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("load enrichment BPF spec: %w", err)
	}
	if err := spec.LoadAndAssign(&e.maps, nil); err != nil {
		return nil, fmt.Errorf("%w: create maps: %v", ErrUnavailable, collector.Explain(err))
	}
	var fentryErr error
	if cfg.ForceKprobe {
		fentryErr = errors.New("skipped (kprobe forced)")
	} else {
		fentryErr = e.attachFentry(spec, specs.FentryLossProbe)
	}
	if fentryErr != nil {
		if kerr := e.attachKprobe(spec, specs.KprobeLossProbe); kerr != nil {
			return nil, fmt.Errorf("%w: fentry: %v; kprobe: %v", ErrUnavailable, fentryErr, kerr)
		}
		cfg.Logger.Debug("enrichment via kprobe", "fentry", fentryErr)
	}
	if e.reader, err = collector.NewRing(e.maps.EnrichEvents); err != nil {
		return nil, fmt.Errorf("open enrichment ring buffer: %w", err)
	}
	e.wg.Add(1)
	go e.read(cfg.PollInterval)
	return e, nil
}

func (e *Collector) attachFentry(spec *ebpf.CollectionSpec, ps *ebpf.ProgramSpec) error {
	prog, err := collector.LoadProgram(spec, ps, &e.maps)
	if err != nil {
		return fmt.Errorf("load fentry/tcp_send_loss_probe: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach fentry/tcp_send_loss_probe: %w", collector.Explain(err))
	}
	e.prog, e.link, e.via = prog, l, "fentry"
	return nil
}

func (e *Collector) attachKprobe(spec *ebpf.CollectionSpec, ps *ebpf.ProgramSpec) error {
	prog, err := collector.LoadProgram(spec, ps, &e.maps)
	if err != nil {
		return fmt.Errorf("load kprobe/tcp_send_loss_probe: %w", collector.Explain(err))
	}
	l, err := link.Kprobe("tcp_send_loss_probe", prog, nil)
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach kprobe/tcp_send_loss_probe: %w", collector.Explain(err))
	}
	e.prog, e.link, e.via = prog, l, "kprobe"
	return nil
}

// Via says how the enrichment is attached: "fentry" or "kprobe".
func (e *Collector) Via() string { return e.via }

// Events delivers one event per tail loss probe sent. Closed after Close.
func (e *Collector) Events() <-chan event.TCP { return e.events }

func (e *Collector) read(poll time.Duration) {
	defer e.wg.Done()
	defer close(e.events)
	e.reader.Consume(poll, e.log, func(raw []byte) bool {
		var ev event.TCP
		if err := tcp.Decode(raw, e.clk, &ev); err != nil {
			e.mu.Lock()
			e.decodeErrors++
			e.mu.Unlock()
			return true
		}
		select {
		case e.events <- ev:
		default: // nobody reads: counted as lost, never blocking the reader
			e.mu.Lock()
			e.decodeErrors++
			e.mu.Unlock()
		}
		return true
	})
}

// Stats returns the enrichment's counters; events userspace could not
// decode or deliver count as Lost.
func (e *Collector) Stats() (Stats, error) {
	var s Stats
	if err := collector.Counters(e.maps.EnrichStats, &s.Hits, &s.Emitted, &s.Lost); err != nil {
		return s, fmt.Errorf("read enrichment stats: %w", err)
	}
	e.mu.Lock()
	s.Lost += e.decodeErrors
	e.mu.Unlock()
	return s, nil
}

// Close detaches and frees everything: close the ring buffer reader (which
// unblocks it), wait for it, close the link, then programs and maps.
func (e *Collector) Close() error {
	e.closeOnce.Do(func() {
		var errs []error
		if e.reader != nil {
			errs = append(errs, e.reader.Close())
			e.wg.Wait()
		} else {
			close(e.events)
		}
		if e.link != nil {
			errs = append(errs, e.link.Close())
		}
		errs = append(errs, e.prog.Close(), e.maps.Close())
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}
