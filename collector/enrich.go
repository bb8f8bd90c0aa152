package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/timeout-tracer/tracer/event"
)

// ErrEnrichUnavailable is wrapped when this kernel lets neither fentry nor
// kprobes attach: the enrichment is optional and the tracer works without.
var ErrEnrichUnavailable = errors.New("optional enrichment not available on this kernel")

// EnrichConfig tunes the optional enrichment.
type EnrichConfig struct {
	// ForceKprobe skips fentry (tests, kernel matrix: both paths).
	ForceKprobe bool
	// PollInterval bounds how long an event waits; 0 means 100 ms.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// EnrichStats are the enrichment's counters, summed over CPUs.
type EnrichStats struct {
	Hits, Emitted, Lost uint64
}

// Enrich is the optional enrichment: kernel functions hooked with fentry
// (or kprobes) where the kernel allows it. It reports every tail loss probe
// the kernel sends (tcp_send_loss_probe) as an event.TCP of kind tlp, with
// the socket's 4-tuple and snapshot; the cookie is set with fentry only,
// and the owner is never known here (the TCP collector has it).
type Enrich struct {
	log    *slog.Logger
	clk    clock
	objs   enrichObjects
	link   link.Link
	via    string
	reader *ring
	events chan event.TCP
	wg     sync.WaitGroup

	mu           sync.Mutex
	decodeErrors uint64
	closeOnce    sync.Once
	closeErr     error
}

// StartEnrich attaches the enrichment with fentry, else with a kprobe.
// When neither works the error wraps ErrEnrichUnavailable and says why for
// each; nothing is left attached.
func StartEnrich(cfg EnrichConfig) (_ *Enrich, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		cfg.Logger.Debug("could not raise RLIMIT_MEMLOCK", "err", err)
	}
	hz, err := kernelHZ()
	if err != nil {
		hz = 250
	}
	e := &Enrich{log: cfg.Logger, clk: clock{wallMinusMono: monoOffset(), hz: hz}, events: make(chan event.TCP, 1024)}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	spec, err := loadEnrich()
	if err != nil {
		return nil, fmt.Errorf("load enrichment BPF spec: %w", err)
	}
	var fentryErr error
	if cfg.ForceKprobe {
		fentryErr = errors.New("skipped (kprobe forced)")
	} else {
		fentryErr = e.attachFentry(spec)
	}
	if fentryErr != nil {
		if kerr := e.attachKprobe(spec); kerr != nil {
			return nil, fmt.Errorf("%w: fentry: %v; kprobe: %v", ErrEnrichUnavailable, fentryErr, kerr)
		}
		cfg.Logger.Debug("enrichment via kprobe", "fentry", fentryErr)
	}
	if e.reader, err = newRing(e.objs.EnrichEvents); err != nil {
		return nil, fmt.Errorf("open enrichment ring buffer: %w", err)
	}
	e.wg.Add(1)
	go e.read(cfg.PollInterval)
	return e, nil
}

func (e *Enrich) attachFentry(spec *ebpf.CollectionSpec) error {
	var objs struct {
		Prog   *ebpf.Program `ebpf:"fentry_loss_probe"`
		Events *ebpf.Map     `ebpf:"enrich_events"`
		Stats  *ebpf.Map     `ebpf:"enrich_stats"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load fentry/tcp_send_loss_probe: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.Prog})
	if err != nil {
		objs.Prog.Close()
		objs.Events.Close()
		objs.Stats.Close()
		return fmt.Errorf("attach fentry/tcp_send_loss_probe: %w", explain(err))
	}
	e.objs.FentryLossProbe, e.objs.EnrichEvents, e.objs.EnrichStats = objs.Prog, objs.Events, objs.Stats
	e.link, e.via = l, "fentry"
	return nil
}

func (e *Enrich) attachKprobe(spec *ebpf.CollectionSpec) error {
	var objs struct {
		Prog   *ebpf.Program `ebpf:"kprobe_loss_probe"`
		Events *ebpf.Map     `ebpf:"enrich_events"`
		Stats  *ebpf.Map     `ebpf:"enrich_stats"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load kprobe/tcp_send_loss_probe: %w", explain(err))
	}
	l, err := link.Kprobe("tcp_send_loss_probe", objs.Prog, nil)
	if err != nil {
		objs.Prog.Close()
		objs.Events.Close()
		objs.Stats.Close()
		return fmt.Errorf("attach kprobe/tcp_send_loss_probe: %w", explain(err))
	}
	e.objs.KprobeLossProbe, e.objs.EnrichEvents, e.objs.EnrichStats = objs.Prog, objs.Events, objs.Stats
	e.link, e.via = l, "kprobe"
	return nil
}

// Via says how the enrichment is attached: "fentry" or "kprobe".
func (e *Enrich) Via() string { return e.via }

// Events delivers one event per tail loss probe sent. Closed after Close.
func (e *Enrich) Events() <-chan event.TCP { return e.events }

func (e *Enrich) read(poll time.Duration) {
	defer e.wg.Done()
	defer close(e.events)
	readRing(e.reader, poll, e.log, func(raw []byte) bool {
		var ev event.TCP
		if err := decodeTCP(raw, e.clk, &ev); err != nil {
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
func (e *Enrich) Stats() (EnrichStats, error) {
	var s EnrichStats
	for i, d := range []*uint64{&s.Hits, &s.Emitted, &s.Lost} {
		var perCPU []uint64
		if err := e.objs.EnrichStats.Lookup(uint32(i), &perCPU); err != nil {
			return s, fmt.Errorf("read enrichment stats: %w", err)
		}
		for _, v := range perCPU {
			*d += v
		}
	}
	e.mu.Lock()
	s.Lost += e.decodeErrors
	e.mu.Unlock()
	return s, nil
}

// Close detaches and frees everything: close the ring buffer reader (which
// unblocks it), wait for it, close the link, then programs and maps.
func (e *Enrich) Close() error {
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
		errs = append(errs, e.objs.Close())
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}
