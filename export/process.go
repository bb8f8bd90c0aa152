package export

import (
	"fmt"
	"sync"

	"github.com/timeout-tracer/tracer/workload"
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

// ProcessOf is what exporters say of a process identified when it was
// attached: its service is the one it names (OTEL_SERVICE_NAME, else
// service.name of OTEL_RESOURCE_ATTRIBUTES), else its executable's name.
func ProcessOf(id workload.Identity) Process {
	p := Process{PID: uint32(id.PID), Executable: id.ExeName, ServiceName: id.Service.Name, Attributes: id.Service.Attributes,
		ContainerID: id.ContainerID, PodUID: id.PodUID, PodName: id.Pod, PodNamespace: id.Namespace}
	if p.Executable == "" {
		p.Executable = id.Comm
	}
	if p.ServiceName == "" {
		// The pod's application name before the executable's: two
		// workloads running the same binary are two services.
		p.ServiceName = id.App
	}
	return p.named()
}

// named fills the service name a process did not give.
func (p Process) named() Process {
	if p.ServiceName == "" {
		p.ServiceName = p.Executable
	}
	if p.ServiceName == "" {
		p.ServiceName = "unknown_service"
	}
	return p
}

// Processes holds the identities of the traced processes: each is
// resolved once, when its process is attached (Add), and carried as a
// value; exporters look it up per report and never read /proc. A process
// stays known after it exits (its last reports come after its exit) until
// it is the least recently used of max; one attached later under the same
// PID replaces it. Safe for concurrent use.
type Processes struct {
	max   int
	mu    sync.Mutex
	byPID map[uint32]*procEntry
	tick  uint64
}

type procEntry struct {
	proc     Process
	lastUsed uint64
}

// NewProcesses returns a registry of at most max processes (0 means 1024).
func NewProcesses(max int) *Processes {
	if max <= 0 {
		max = 1024
	}
	return &Processes{max: max, byPID: make(map[uint32]*procEntry)}
}

// Add registers the identity of an attached process.
func (ps *Processes) Add(p Process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.tick++
	if _, ok := ps.byPID[p.PID]; !ok && len(ps.byPID) >= ps.max {
		ps.evict()
	}
	ps.byPID[p.PID] = &procEntry{proc: p.named(), lastUsed: ps.tick}
}

// Lookup returns the identity of pid; comm names a process never
// registered.
func (ps *Processes) Lookup(pid uint32, comm string) Process {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if e, ok := ps.byPID[pid]; ok {
		ps.tick++
		e.lastUsed = ps.tick
		return e.proc
	}
	return Process{PID: pid, Executable: comm}.named()
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
