package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// ProcKind says whether a process started a program or ended.
type ProcKind uint8

const (
	ProcExec ProcKind = ProcKind(procTtProcKindTT_PROC_EXEC)
	ProcExit ProcKind = ProcKind(procTtProcKindTT_PROC_EXIT)
)

func (k ProcKind) String() string {
	switch k {
	case ProcExec:
		return "exec"
	case ProcExit:
		return "exit"
	}
	return fmt.Sprintf("proc_kind(%d)", uint8(k))
}

// ProcEvent is one exec (a process now runs a new program) or exit (the
// last thread of a process ended), node-wide.
type ProcEvent struct {
	Time time.Time
	Mono uint64
	Kind ProcKind
	PID  uint32
	PPID uint32
	Comm string
}

// Procs follows process execs and exits on the whole node from two
// scheduler tracepoints. Create it with StartProcs; Close it once.
type Procs struct {
	log    *slog.Logger
	clk    clock
	coll   *ebpf.Collection
	links  []link.Link
	reader *ring
	events chan ProcEvent
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	mu     sync.Mutex
	undec  uint64
	full   uint64 // events not delivered: the consumer's channel was full
}

// StartProcs loads and attaches the process tracepoints. Events the
// consumer does not take in time are counted (Lost), never blocking the
// kernel side: a consumer that sees Lost grow rescans /proc.
func StartProcs(log *slog.Logger) (_ *Procs, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		log.Debug("could not raise RLIMIT_MEMLOCK", "err", err)
	}
	p := &Procs{log: log, clk: clock{wallMinusMono: monoOffset()}, events: make(chan ProcEvent, 4096), done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	spec, err := loadProc()
	if err != nil {
		return nil, fmt.Errorf("load process BPF spec: %w", err)
	}
	if p.coll, err = ebpf.NewCollection(spec); err != nil {
		return nil, fmt.Errorf("load process programs: %w", explain(err))
	}
	for _, h := range []struct{ prog, tp string }{{"proc_exec", "sched_process_exec"}, {"proc_exit", "sched_process_exit"}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: h.tp, Program: p.coll.Programs[h.prog]})
		if err != nil {
			return nil, fmt.Errorf("attach raw tracepoint %s: %w", h.tp, explain(err))
		}
		p.links = append(p.links, l)
	}
	if p.reader, err = newRing(p.coll.Maps["proc_events"]); err != nil {
		return nil, fmt.Errorf("open process ring buffer: %w", err)
	}
	p.wg.Add(1)
	go p.read()
	return p, nil
}

var procEventSize = int(unsafe.Sizeof(procTtProcEvent{}))

func (p *Procs) read() {
	defer p.wg.Done()
	defer close(p.events)
	readRing(p.reader, time.Second /* a safety net: every sample wakes the reader */, p.log, func(raw []byte) bool {
		ev, err := decodeProc(raw, p.clk)
		if err != nil {
			p.mu.Lock()
			p.undec++
			p.mu.Unlock()
			return true
		}
		select {
		case p.events <- ev:
		case <-p.done:
			return false
		default:
			p.mu.Lock()
			p.full++
			p.mu.Unlock()
		}
		return true
	})
}

func decodeProc(raw []byte, clk clock) (ProcEvent, error) {
	if len(raw) < procEventSize {
		return ProcEvent{}, fmt.Errorf("decode process event: %d bytes, want %d", len(raw), procEventSize)
	}
	var r procTtProcEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), procEventSize), raw)
	k := ProcKind(r.Kind)
	if k != ProcExec && k != ProcExit {
		return ProcEvent{}, fmt.Errorf("decode process event: unknown kind %d", r.Kind)
	}
	return ProcEvent{Time: clk.wall(r.TsNs), Mono: r.TsNs, Kind: k, PID: r.Tgid, PPID: r.Ppid, Comm: cString(r.Comm[:])}, nil
}

// Events delivers execs and exits in kernel order. Closed after Close.
func (p *Procs) Events() <-chan ProcEvent { return p.events }

// Lost is the number of events lost (ring buffer full in the kernel, or
// the consumer too slow) or undecodable since start.
func (p *Procs) Lost() uint64 {
	var n uint64
	var perCPU []uint64
	if p.coll != nil && p.coll.Maps["proc_lost"].Lookup(uint32(0), &perCPU) == nil {
		for _, v := range perCPU {
			n += v
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return n + p.full + p.undec
}

// Close detaches both tracepoints and frees the programs. Safe to call
// more than once.
func (p *Procs) Close() error {
	var errs []error
	p.once.Do(func() {
		close(p.done)
		for _, l := range p.links {
			errs = append(errs, l.Close())
		}
		if p.reader != nil {
			errs = append(errs, p.reader.Close())
		} else {
			close(p.events)
		}
		p.wg.Wait()
		if p.coll != nil {
			p.coll.Close()
		}
	})
	return errors.Join(errs...)
}
