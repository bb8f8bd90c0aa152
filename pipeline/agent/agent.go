// Package agent is the node agent behind `tracer daemon`: it finds the Go
// processes of the node (a /proc scan at start, then process execs and exits
// from the kernel), attaches the deadline probes to each (once per
// executable file, filtered per process), detaches them on exit, and feeds
// one pipeline (kernel TCP collector for the whole node, correlator) whose
// reports carry each process's container and pod.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/timeout-tracer/tracer/collector/goprobe"
	"github.com/timeout-tracer/tracer/collector/proc"
	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/pipeline"
	"github.com/timeout-tracer/tracer/tick"
	"github.com/timeout-tracer/tracer/workload"
)

// Identity is what the agent knows of a process: its executable, cgroup,
// container and pod.
type Identity = workload.Identity

// Config says what the agent traces and where its output goes.
type Config struct {
	// Pipeline: detail tier, policy, activity (PID is ignored).
	Pipeline pipeline.Config
	// Sink gets the reports (enriched with container and pod) and the
	// rest of the pipeline's output.
	Sink pipeline.Sink
	// Identify reads a process's identity; nil uses workload.Identify on
	// ProcRoot.
	Identify func(pid int) (Identity, error)
	// Pod names a pod by UID (the Kubernetes watch); nil or not found
	// leaves reports with the pod's UID only. It must not block.
	Pod func(uid string) (Pod, bool)
	// NeedsPod: the admission looks at pod names, so a process in a pod
	// not known yet is looked at again on the next rescan.
	NeedsPod bool
	// Admit says whether a process may be traced and, if not, why (a
	// short stable token: "excluded_exe", "not_included", ...). nil
	// admits every process.
	Admit func(Identity) (ok bool, reason string)
	// MaxProcesses caps the traced processes; 0 means 256.
	MaxProcesses int
	// ProcRoot is where /proc is; "" means /proc.
	ProcRoot string
	// Rescan is how often /proc is scanned again for processes whose
	// exec was lost (and traced ones that are gone); 0 means 30 s.
	Rescan time.Duration
	Logger *slog.Logger

	// Hooks for metrics; each may be nil.
	OnAttach func(id Identity, sinceExec time.Duration)
	OnDetach func(id Identity)
	// OnNamed, if set, is called when a process's pod is named after its
	// attach (the Kubernetes watch did not know the pod yet), with the
	// identity as now known.
	OnNamed func(id Identity)
	OnSkip  func(id Identity, reason string)
}

// Agent traces the Go processes of the node. Start it, Run it, Close it.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	pipe  *pipeline.Pipeline
	procs *proc.Collector
	self  int

	cands   chan candidate
	started time.Time // before the kernel collectors: a process younger has all its events

	mu       sync.Mutex
	traced   map[int]Identity
	starts   map[int]string             // pid -> start time of the traced process (a pid reused is another process)
	ids      map[int]identEntry         // identities of traced and recently exited processes, for reports
	skipped  map[int]string             // pid -> start time of a process already judged (not traced)
	notGo    map[workload.FileID]string // executables known not traceable, with why
	lastLost uint64
}

type identEntry struct {
	id   Identity
	gone time.Time // zero while traced
}

type candidate struct {
	pid  int
	exec time.Time // when it exec'd, zero from a scan
}

// identLinger keeps an exited process's identity for its last reports
// (they come out after the correlator's grace window).
const identLinger = time.Minute

// maxNotGo bounds the cache of executables known not traceable.
const maxNotGo = 4096

// Start loads the node-wide collectors and begins following process
// execs and exits. Run then scans /proc and traces.
func Start(cfg Config) (_ *Agent, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = 256
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = 30 * time.Second
	}
	if cfg.Identify == nil {
		root := cfg.ProcRoot
		cfg.Identify = func(pid int) (Identity, error) { return workload.Identify(root, pid) }
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, self: os.Getpid(), cands: make(chan candidate, 8192),
		traced: map[int]Identity{}, starts: map[int]string{}, ids: map[int]identEntry{}, skipped: map[int]string{}, notGo: map[workload.FileID]string{}}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	// The container and pod go into each report before any sink reads it.
	sink := pipeline.Tee(pipeline.Reports(func(r *correlate.Report) error { a.enrich(r); return nil }), cfg.Sink)
	// Execs first: a process that starts during the scan is seen either
	// way.
	if a.procs, err = proc.Start(cfg.Logger); err != nil {
		return nil, fmt.Errorf("follow process execs and exits: %w", err)
	}
	a.started = time.Now()
	if a.pipe, err = pipeline.StartNode(cfg.Pipeline, sink); err != nil {
		return nil, err
	}
	a.pipe.SetUnjudged(a.unjudged)
	return a, nil
}

// Pipeline is the agent's pipeline, for its counters.
func (a *Agent) Pipeline() *pipeline.Pipeline { return a.pipe }

// ProcEventsLost is the number of exec/exit events lost (each triggers a
// rescan).
func (a *Agent) ProcEventsLost() uint64 { return a.procs.Lost() }

// Traced returns the identities of the traced processes.
func (a *Agent) Traced() []Identity {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Identity, 0, len(a.traced))
	for _, id := range a.traced {
		out = append(out, id)
	}
	return out
}

// Run traces until ctx ends, then drains the pipeline (its last reports
// come out) and returns. Close afterwards.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pipeDone := make(chan error, 1)
	go func() { pipeDone <- a.pipe.Run(ctx, nil) }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.attachLoop(ctx)
	}()
	a.scan()
	// On the instants of the collectors' timers (tick.NewTicker).
	tk := tick.NewTicker(a.cfg.Rescan)
	defer tk.Stop()
	lostCheck := tick.NewTicker(time.Second)
	defer lostCheck.Stop()
	events := a.procs.Events()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-pipeDone:
			pipeDone = nil
			cancel()
			break loop
		case ev, ok := <-events:
			if !ok {
				err = errors.New("process event stream ended unexpectedly")
				cancel()
				break loop
			}
			a.onProc(ev)
		case <-tk.C:
			tk.Next()
			a.scan()
		case <-lostCheck.C:
			lostCheck.Next()
			if n := a.procs.Lost(); n != a.lastLost {
				a.log.Warn("process exec/exit events lost: rescanning /proc", "lost_total", n)
				a.lastLost = n
				a.scan()
			}
		}
	}
	wg.Wait()
	if pipeDone != nil {
		if perr := <-pipeDone; err == nil {
			err = perr
		}
	}
	return err
}

func (a *Agent) onProc(ev proc.Event) {
	pid := int(ev.PID)
	switch ev.Kind {
	case proc.Exec:
		// A traced process that runs a new program is another program.
		a.detach(pid, "exec")
		a.mu.Lock()
		delete(a.skipped, pid)
		a.mu.Unlock()
		a.pipe.Forget(pid)
		if a.worthExpecting(pid) {
			a.pipe.Expect(pid)
		}
		a.enqueue(candidate{pid: pid, exec: ev.Time})
	case proc.Exit:
		if a.sameProcess(pid) {
			// The last thread may still be in do_exit: look again in a
			// moment. A process still running then was not the one that
			// exited (seen once in CI: a storm target detached on an exit
			// event at the end of its storm, alive and expiring after it),
			// and stays traced; the rescan detaches what is really gone.
			go func() {
				time.Sleep(exitRecheck)
				if a.sameProcess(pid) {
					a.log.Warn("exit event for a process still running: ignored", "pid", pid)
					return
				}
				a.onExit(pid)
			}()
			return
		}
		a.onExit(pid)
	}
}

// exitRecheck is how long after an exit event of a process that still
// looks alive it is looked at again.
const exitRecheck = 200 * time.Millisecond

// sameProcess: pid is alive, not exiting, and, if traced, still the
// process that was traced: the same start time. A pid reused by a process
// that did not exec (a fork, no exec event to detach the first) before the
// recheck would otherwise keep the exited process traced until the next
// rescan.
func (a *Agent) sameProcess(pid int) bool {
	if !alive(a.cfg.ProcRoot, pid) || exiting(a.cfg.ProcRoot, pid) {
		return false
	}
	a.mu.Lock()
	start, traced := a.starts[pid]
	a.mu.Unlock()
	return !traced || start == "" || start == startTime(a.cfg.ProcRoot, pid)
}

// worthExpecting: a process that has just exec'd and may well be traced
// (an executable not known to be other than Go, admitted by the filters as
// far as they can tell now). Its kernel events are kept from its exec
// until it is judged (Pipeline.Expect): the attach queue and the analysis
// of its executable take from milliseconds to seconds, in which a one-shot
// program makes its call. Processes the filters exclude are not kept.
func (a *Agent) worthExpecting(pid int) bool {
	if pid == a.self {
		return false
	}
	id, err := a.cfg.Identify(pid)
	if err != nil {
		return false
	}
	a.mu.Lock()
	_, notGo := a.notGo[id.File]
	a.mu.Unlock()
	if notGo {
		return false
	}
	a.name(&id)
	if a.cfg.Admit == nil || a.cfg.NeedsPod && id.PodUID != "" && id.Pod == "" {
		return true
	}
	ok, _ := a.cfg.Admit(id)
	return ok
}

// youngAge is how old a process with kernel events and no verdict yet may
// be and still be expected (Pipeline.SetUnjudged): its exec event is on
// its way, or was lost.
const youngAge = 10 * time.Second

// unjudged answers the node stream about a process it knows nothing of.
func (a *Agent) unjudged(pid uint32) bool {
	a.mu.Lock()
	_, skipped := a.skipped[int(pid)]
	a.mu.Unlock()
	if skipped {
		return false
	}
	// Younger than the agent too: a process that started before the
	// kernel collector holds connections whose beginning it did not see.
	age, ok := processAge(a.cfg.ProcRoot, int(pid))
	return ok && age < youngAge && age < time.Since(a.started) && a.worthExpecting(int(pid))
}

func (a *Agent) onExit(pid int) {
	a.pipe.Forget(pid)
	a.detach(pid, "exit")
	a.mu.Lock()
	delete(a.skipped, pid)
	a.mu.Unlock()
}

func (a *Agent) enqueue(c candidate) {
	if c.pid == a.self {
		return
	}
	select {
	case a.cands <- c:
	default:
		// The next rescan finds it: delayed, not lost.
		a.pipe.Unexpect(c.pid)
		a.log.Warn("discovery queue full: the process will be looked at on the next rescan", "pid", c.pid)
	}
}

// scan looks at every process of /proc: the ones not judged yet become
// candidates; traced ones that are gone are detached.
func (a *Agent) scan() {
	ents, err := os.ReadDir(a.cfg.ProcRoot)
	if err != nil {
		a.log.Error("scan processes", "proc", a.cfg.ProcRoot, "err", err)
		return
	}
	alive := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == a.self {
			continue
		}
		alive[pid] = true
		a.mu.Lock()
		_, traced := a.traced[pid]
		judged, ok := a.skipped[pid]
		a.mu.Unlock()
		if traced || ok && judged == startTime(a.cfg.ProcRoot, pid) {
			continue
		}
		a.enqueue(candidate{pid: pid})
	}
	a.mu.Lock()
	var gone []int
	starts := map[int]string{}
	for pid := range a.traced {
		if !alive[pid] {
			gone = append(gone, pid)
		} else if a.starts[pid] != "" {
			starts[pid] = a.starts[pid]
		}
	}
	for pid := range a.skipped {
		if !alive[pid] {
			delete(a.skipped, pid)
		}
	}
	for pid, e := range a.ids {
		if !e.gone.IsZero() && time.Since(e.gone) > identLinger {
			delete(a.ids, pid)
		}
	}
	a.mu.Unlock()
	// A pid reused by another process (one that did not exec: no exec
	// event detached the first) is gone too.
	for pid, start := range starts {
		if st := startTime(a.cfg.ProcRoot, pid); st != "" && st != start {
			gone = append(gone, pid)
		}
	}
	for _, pid := range gone {
		a.detach(pid, "gone")
	}
}

// analysisGCPercent is GOGC while an executable is analysed.
const analysisGCPercent = 25

func (a *Agent) attachLoop(ctx context.Context) {
	analysed := false
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-a.cands:
			analysed = a.consider(c) || analysed
			if analysed && len(a.cands) == 0 {
				analysed = false
				// An executable was analysed and nothing else waits:
				// what the analysis read (tables of tens of MB for a
				// large binary) goes back to the kernel now, not when
				// the runtime gets to it. A forced collection of the
				// agent's small heap costs a few ms, once per burst.
				debug.FreeOSMemory()
			}
		}
	}
}

// consider decides whether to trace a process, and attaches if so. Every
// process not traced is said once (debug for kernel threads and programs
// that are not Go, info otherwise) and counted by reason. It reports
// whether it analysed an executable (tried to attach).
func (a *Agent) consider(c candidate) (analysed bool) {
	a.mu.Lock()
	_, traced := a.traced[c.pid]
	a.mu.Unlock()
	if traced {
		return false
	}
	// Judged now: unless traced (AddProcess ends the expectation), its
	// kernel events are no longer kept.
	defer func() {
		a.mu.Lock()
		_, traced := a.traced[c.pid]
		a.mu.Unlock()
		if !traced {
			a.pipe.Unexpect(c.pid)
		}
	}()
	start := startTime(a.cfg.ProcRoot, c.pid) // before the analysis: the pid may be reused by its end
	id, err := a.cfg.Identify(c.pid)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist) || errors.Is(err, workload.ErrNoExecutable):
			return // gone already, or a kernel thread or zombie
		case errors.Is(err, os.ErrPermission):
			a.skip(Identity{PID: c.pid}, "permission", err)
		default:
			a.skip(Identity{PID: c.pid}, "error", err)
		}
		return false
	}
	a.mu.Lock()
	why, known := a.notGo[id.File]
	a.mu.Unlock()
	if known {
		a.skip(id, "not_go", errors.New(why))
		return false
	}
	a.name(&id)
	if a.cfg.NeedsPod && id.PodUID != "" && id.Pod == "" {
		// Its pod's names are not known yet: judged on a later rescan.
		a.log.Debug("process in a pod not known yet: looked at again later", "pid", id.PID, "pod_uid", id.PodUID)
		return false
	}
	if a.cfg.Admit != nil {
		if ok, reason := a.cfg.Admit(id); !ok {
			a.skip(id, reason, nil)
			return false
		}
	}
	// The service it names itself: read once, for the admitted ones only.
	if svc, err := workload.ReadService(a.cfg.ProcRoot, id.PID); err == nil {
		id.Service = svc
	} else {
		a.log.Debug("service name not read: the executable names it", "pid", id.PID, "err", err)
	}
	a.mu.Lock()
	full := len(a.traced) >= a.cfg.MaxProcesses
	a.mu.Unlock()
	if full {
		a.skip(id, "cap", fmt.Errorf("already tracing --max-processes=%d processes", a.cfg.MaxProcesses))
		return false
	}
	analysed = true
	// Analysing an executable reads tens of MB that are garbage a moment
	// later (a large binary's symbol table, DWARF, type data): collected
	// four times as often meanwhile, the agent's peak stays near what the
	// analysis holds, not twice that. The collector's cost is the
	// analysis's, once per executable.
	gc := debug.SetGCPercent(analysisGCPercent)
	_, err = a.pipe.AddProcess(c.pid)
	debug.SetGCPercent(gc)
	if err != nil {
		if errors.Is(err, goprobe.ErrNotTraceable) {
			// A process exiting while it is analysed fails like a program
			// that is not Go: only a live, readable one is a verdict on
			// its executable (else every later process of the file would
			// be skipped).
			if !alive(a.cfg.ProcRoot, c.pid) || exiting(a.cfg.ProcRoot, c.pid) ||
				errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
				return true
			}
			a.mu.Lock()
			if len(a.notGo) >= maxNotGo {
				clear(a.notGo)
			}
			a.notGo[id.File] = err.Error()
			a.mu.Unlock()
			a.skip(id, "not_go", err)
			return true
		}
		if !alive(a.cfg.ProcRoot, c.pid) {
			return true
		}
		a.skip(id, "error", err)
		return true
	}
	a.mu.Lock()
	a.traced[c.pid] = id
	a.starts[c.pid] = start
	a.ids[c.pid] = identEntry{id: id}
	a.mu.Unlock()
	var since time.Duration
	if !c.exec.IsZero() {
		since = time.Since(c.exec)
	}
	a.log.Info("tracing process", "pid", c.pid, "exe", id.Exe, "container_id", id.ContainerID, "pod_uid", id.PodUID,
		"pod", id.Pod, "namespace", id.Namespace, "since_exec", since)
	if a.cfg.OnAttach != nil {
		a.cfg.OnAttach(id, since)
	}
	// Its exit event may have been handled while it was being attached
	// (the detach then found nothing traced): a process gone by now is
	// detached here, else it would stay traced for good.
	if !a.sameProcess(c.pid) {
		a.detach(c.pid, "exit")
	}
	return true
}

func (a *Agent) skip(id Identity, reason string, err error) {
	a.mu.Lock()
	_, seen := a.skipped[id.PID]
	a.skipped[id.PID] = startTime(a.cfg.ProcRoot, id.PID)
	a.mu.Unlock()
	if seen {
		return
	}
	lvl := slog.LevelInfo
	if reason == "not_go" {
		lvl = slog.LevelDebug
	}
	attrs := []any{"pid", id.PID, "exe", id.Exe, "reason", reason}
	if err != nil {
		attrs = append(attrs, "detail", err.Error())
	}
	a.log.Log(context.Background(), lvl, "not tracing process", attrs...)
	if a.cfg.OnSkip != nil {
		a.cfg.OnSkip(id, reason)
	}
}

func (a *Agent) detach(pid int, why string) {
	a.mu.Lock()
	id, ok := a.traced[pid]
	delete(a.traced, pid)
	delete(a.starts, pid)
	if ok {
		a.ids[pid] = identEntry{id: id, gone: time.Now()}
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	if err := a.pipe.RemoveProcess(pid); err != nil {
		a.log.Warn("detach process", "pid", pid, "err", err)
	}
	a.log.Info("detached process", "pid", pid, "exe", id.Exe, "why", why)
	if a.cfg.OnDetach != nil {
		a.cfg.OnDetach(id)
	}
}

// Pod is what the Kubernetes watch knows of a pod.
type Pod struct {
	Name, Namespace string
	Labels          map[string]string // read only
}

// name fills the pod's name, namespace and application from the
// Kubernetes watch.
func (a *Agent) name(id *Identity) {
	if a.cfg.Pod == nil || id.PodUID == "" || id.Pod != "" {
		return
	}
	if p, ok := a.cfg.Pod(id.PodUID); ok {
		id.Pod, id.Namespace, id.App = p.Name, p.Namespace, workload.PodApp(p.Labels)
	}
}

// enrich puts the process's container and pod on its report (the pod's
// names looked up again if the watch did not know them at attach time).
func (a *Agent) enrich(r *correlate.Report) {
	a.mu.Lock()
	e, ok := a.ids[int(r.Deadline.PID)]
	a.mu.Unlock()
	if !ok {
		return
	}
	if e.id.PodUID != "" && e.id.Pod == "" {
		a.name(&e.id)
		if e.id.Pod != "" {
			a.mu.Lock()
			if cur, ok := a.ids[int(r.Deadline.PID)]; ok {
				cur.id.Pod, cur.id.Namespace, cur.id.App = e.id.Pod, e.id.Namespace, e.id.App
				a.ids[int(r.Deadline.PID)] = cur
			}
			a.mu.Unlock()
			if a.cfg.OnNamed != nil {
				a.cfg.OnNamed(e.id)
			}
		}
	}
	r.ContainerID, r.PodUID = e.id.ContainerID, e.id.PodUID
	r.PodName, r.PodNamespace = e.id.Pod, e.id.Namespace
}

// Close detaches everything. Safe after a failed Start.
func (a *Agent) Close() error {
	var errs []error
	if a.pipe != nil {
		errs = append(errs, a.pipe.Close())
	}
	if a.procs != nil {
		errs = append(errs, a.procs.Close())
	}
	return errors.Join(errs...)
}

// startTime is field 22 of /proc/PID/stat: with the PID it names one
// process. "" when the process is gone.
func startTime(procRoot string, pid int) string {
	if f := statFields(procRoot, pid); len(f) >= 20 {
		return f[19]
	}
	return ""
}

// statFields are the fields of /proc/PID/stat after the command name (its
// state first), nil when the file cannot be read or parsed.
func statFields(procRoot string, pid int) []string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the name may hold any byte, ')' too
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// processAge is how long ago process pid started: its start time (in
// clock ticks since boot, USER_HZ 100 on Linux) against /proc/uptime.
func processAge(procRoot string, pid int) (time.Duration, bool) {
	st, err := strconv.ParseUint(startTime(procRoot, pid), 10, 64)
	if err != nil {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "uptime"))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, false
	}
	age := time.Duration(up*float64(time.Second)) - time.Duration(st)*(time.Second/100)
	return max(age, 0), true
}

func alive(procRoot string, pid int) bool {
	_, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(pid)))
	return err == nil
}

// exiting reports whether the process is a zombie or dying (its executable
// and memory are gone).
func exiting(procRoot string, pid int) bool {
	f := statFields(procRoot, pid)
	if len(f) == 0 {
		return true
	}
	if st := f[0][0]; st == 'Z' || st == 'X' || st == 'x' {
		return true
	}
	// Still in do_exit: exit_signals sets PF_EXITING on the thread at its
	// start, before the exit event, long before the process is a zombie
	// (its memory and files are released first: under load, more than the
	// 200 ms recheck).
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h),
// shown in /proc/PID/stat's flags field.
const pfExiting = 0x00000004
