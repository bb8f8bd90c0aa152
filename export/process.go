package export

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Process is what exporters say about a traced process: the OTel resource
// of its spans and the service label of its metrics.
type Process struct {
	PID uint32
	// ServiceName is the process's own OTEL_SERVICE_NAME, else service.name
	// from its OTEL_RESOURCE_ATTRIBUTES, else its executable's name.
	ServiceName string
	// Executable is the base name of /proc/PID/exe, else the comm.
	Executable string
	// Attributes are the other entries of the process's own
	// OTEL_RESOURCE_ATTRIBUTES (service.namespace, deployment.environment,
	// ...), so that the timeout span's resource matches the service's own
	// spans. At most maxResourceAttributes.
	Attributes map[string]string
	// ContainerID and PodUID, when a node agent knows them; PodName and
	// PodNamespace when it watches the Kubernetes API.
	ContainerID, PodUID   string
	PodName, PodNamespace string
}

// key identifies a resource: a new one when any of these change.
func (p Process) key() string {
	return fmt.Sprintf("%d\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s", p.PID, p.ServiceName, p.Executable, p.ContainerID, p.PodUID, p.PodName, p.PodNamespace)
}

const maxResourceAttributes = 32

// Processes resolves and caches Process identities. A cached entry is
// trusted while /proc/PID/stat shows the same start time (a reused PID is
// another process; checked at most every second), and after the process
// has exited (its last reports come after its exit). Safe for concurrent
// use.
type Processes struct {
	procRoot string
	max      int
	mu       sync.Mutex
	byPID    map[uint32]*procEntry
	tick     uint64
}

type procEntry struct {
	proc     Process
	start    string // field 22 of /proc/PID/stat
	checked  time.Time
	lastUsed uint64
}

// recheck is how long a cached identity is trusted before /proc is read
// again: lookups come per report and, with the call probes, per call.
const recheck = time.Second

// NewProcesses returns a resolver reading procRoot ("" means /proc),
// caching at most max processes (0 means 1024; the least recently used
// goes first).
func NewProcesses(procRoot string, max int) *Processes {
	if procRoot == "" {
		procRoot = "/proc"
	}
	if max <= 0 {
		max = 1024
	}
	return &Processes{procRoot: procRoot, max: max, byPID: make(map[uint32]*procEntry)}
}

// Lookup returns the identity of pid; comm names it when /proc has nothing
// (the process is gone, or the tracer may not read its environment).
func (ps *Processes) Lookup(pid uint32, comm string) Process {
	now := time.Now()
	ps.mu.Lock()
	if e, ok := ps.byPID[pid]; ok && now.Sub(e.checked) < recheck {
		ps.tick++
		e.lastUsed = ps.tick
		p := e.proc
		ps.mu.Unlock()
		return p
	}
	ps.mu.Unlock()
	start, alive := ps.startTime(pid)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.tick++
	if e, ok := ps.byPID[pid]; ok && (!alive || e.start == start) {
		e.lastUsed, e.checked = ps.tick, now
		return e.proc
	}
	p := ps.read(pid, comm)
	if !alive {
		// Not cached: a later lookup may yet find the process.
		return p
	}
	if len(ps.byPID) >= ps.max {
		ps.evict()
	}
	ps.byPID[pid] = &procEntry{proc: p, start: start, checked: now, lastUsed: ps.tick}
	return p
}

func (ps *Processes) evict() {
	var oldest uint32
	first := true
	for pid, e := range ps.byPID {
		if first || e.lastUsed < ps.byPID[oldest].lastUsed {
			oldest, first = pid, false
		}
	}
	delete(ps.byPID, oldest)
}

// startTime is the process's start time in clock ticks since boot, as a
// string: with the PID it identifies one process.
func (ps *Processes) startTime(pid uint32) (string, bool) {
	b, err := os.ReadFile(filepath.Join(ps.procRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return "", false
	}
	// The comm (field 2) may hold spaces and parentheses: count from the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(b[i+1:]))
	const startField = 22 - 3 // fields after the comm start at field 3
	if len(fields) <= startField {
		return "", false
	}
	return fields[startField], true
}

func (ps *Processes) read(pid uint32, comm string) Process {
	p := Process{PID: pid, Executable: comm}
	dir := filepath.Join(ps.procRoot, strconv.FormatUint(uint64(pid), 10))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		p.Executable = filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	}
	env, _ := os.ReadFile(filepath.Join(dir, "environ"))
	var svc, resAttrs string
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("OTEL_SERVICE_NAME=")); ok {
			svc = string(v)
		} else if v, ok := bytes.CutPrefix(kv, []byte("OTEL_RESOURCE_ATTRIBUTES=")); ok {
			resAttrs = string(v)
		}
	}
	attrs := parseResourceAttributes(resAttrs)
	if svc == "" {
		svc = attrs["service.name"]
	}
	delete(attrs, "service.name")
	if len(attrs) > 0 {
		p.Attributes = attrs
	}
	p.ServiceName = svc
	if p.ServiceName == "" {
		p.ServiceName = p.Executable
	}
	if p.ServiceName == "" {
		p.ServiceName = "unknown_service"
	}
	return p
}

// parseResourceAttributes parses OTEL_RESOURCE_ATTRIBUTES: key=value pairs
// separated by commas, values percent-encoded. Malformed entries are
// skipped; at most maxResourceAttributes are kept.
func parseResourceAttributes(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			continue
		}
		if len(out) >= maxResourceAttributes {
			break
		}
		out[k] = val
	}
	return out
}
