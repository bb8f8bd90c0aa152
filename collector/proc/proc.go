package proc

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
)

// Kind says whether a process started a program or ended.
type Kind uint8

// The kinds, numbered as the kernel side writes them.
const (
	Exec Kind = Kind(procTtProcKindTT_PROC_EXEC)
	Exit Kind = Kind(procTtProcKindTT_PROC_EXIT)
)

// String names the kind as the logs do.
func (k Kind) String() string {
	switch k {
	case Exec:
		return "exec"
	case Exit:
		return "exit"
	}
	return fmt.Sprintf("proc_kind(%d)", uint8(k))
}

// Event is one exec (a process now runs a new program) or exit (the
// last thread of a process ended), node-wide.
type Event struct {
	Time time.Time
	Mono uint64
	Kind Kind
	PID  uint32
	PPID uint32
	Comm string
}

// Collector follows process execs and exits on the whole node. Create it
// with Start; Close it once.
type Collector struct {
	log    *slog.Logger
	clk    collector.Clock
	objs   procObjects
	links  []link.Link
	reader *collector.Ring
	events chan Event
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	mu     sync.Mutex
	undec  uint64
	full   uint64 // events not delivered: the consumer's channel was full
}

// Start loads and attaches the process tracepoints. Events the consumer
// does not take in time are counted (Lost), never blocking the kernel
// side: a consumer that sees Lost grow rescans /proc.
func Start(log *slog.Logger) (_ *Collector, err error) {
	log = collector.Logger(log)
	if err := collector.Setup(log); err != nil {
		return nil, err
	}
	p := &Collector{log: log, clk: collector.NewClock(0), events: make(chan Event, 4096), done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	spec, err := loadProc()
	if err != nil {
		return nil, fmt.Errorf("load process BPF spec: %w", err)
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load process programs: %w", collector.Explain(err))
	}
	for _, h := range []struct {
		prog *ebpf.Program
		tp   string
	}{{p.objs.ProcExec, "sched_process_exec"}, {p.objs.ProcExit, "sched_process_exit"}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: h.tp, Program: h.prog})
		if err != nil {
			return nil, fmt.Errorf("attach raw tracepoint %s: %w", h.tp, collector.Explain(err))
		}
		p.links = append(p.links, l)
	}
	if p.reader, err = collector.NewRing(p.objs.ProcEvents); err != nil {
		return nil, fmt.Errorf("open process ring buffer: %w", err)
	}
	p.wg.Add(1)
	go p.read()
	return p, nil
}

var procEventSize = int(unsafe.Sizeof(procTtProcEvent{}))

func (p *Collector) read() {
	defer p.wg.Done()
	defer close(p.events)
	p.reader.Consume(time.Second /* a safety net: every sample wakes the reader */, p.log, func(raw []byte) bool {
		ev, err := decode(raw, p.clk)
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

func decode(raw []byte, clk collector.Clock) (Event, error) {
	if len(raw) < procEventSize {
		return Event{}, fmt.Errorf("decode process event: %d bytes, want %d", len(raw), procEventSize)
	}
	var r procTtProcEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), procEventSize), raw)
	k := Kind(r.Kind)
	if k != Exec && k != Exit {
		return Event{}, fmt.Errorf("decode process event: unknown kind %d", r.Kind)
	}
	return Event{Time: clk.Wall(r.TsNs), Mono: r.TsNs, Kind: k, PID: r.Tgid, PPID: r.Ppid, Comm: collector.CString(r.Comm[:])}, nil
}

// Events delivers execs and exits in kernel order. Closed after Close.
func (p *Collector) Events() <-chan Event { return p.events }

// Lost is the number of events lost (ring buffer full in the kernel, or
// the consumer too slow) or undecodable since start.
func (p *Collector) Lost() uint64 {
	var n uint64
	var perCPU []uint64
	if p.objs.ProcLost != nil && p.objs.ProcLost.Lookup(uint32(0), &perCPU) == nil {
		for _, v := range perCPU {
			n += v
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return n + p.full + p.undec
}

// Close detaches both tracepoints, closes the ring buffer reader (which
// unblocks it; the done channel alone would not), waits for it, then frees
// the programs and maps. Safe to call more than once.
func (p *Collector) Close() error {
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
		p.objs.Close()
	})
	return errors.Join(errs...)
}
