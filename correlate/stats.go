package correlate

// Stats counts what the correlator did and, above all, what it had to drop:
// no eviction is silent.
type Stats struct {
	Events uint64 `json:"events"`
	TCP    uint64 `json:"tcp"` // TCP events other than activity
	// StateAtAttach: connections older than the tracer found in trouble
	// (RTO backoff, SYN retries, zero window) when their process was
	// attached, recorded as evidence (Correlator.StateAtAttach).
	StateAtAttach uint64 `json:"state_at_attach"`
	Activity      uint64 `json:"activity"` // activity samples, in either form
	Bindings      uint64 `json:"bindings"`
	Deadlines     uint64 `json:"deadlines"`
	Local         uint64 `json:"local"` // local time-lost intervals (throttling, run-queue, GC)
	Reports       uint64 `json:"reports"`

	// Unjoinable counts events without a socket cookie, which cannot be
	// joined with anything and are ignored.
	Unjoinable uint64 `json:"unjoinable"`
	// OutOfOrder counts events older than the stream's time: they are
	// applied, but a report already emitted did not see them.
	OutOfOrder uint64 `json:"out_of_order"`
	// ReportsEarly counts reports emitted before their grace window ended
	// because MaxPending deadlines were waiting.
	ReportsEarly uint64 `json:"reports_early"`

	SocketsEvicted    uint64 `json:"sockets_evicted"`    // MaxSockets reached: least recently seen dropped
	SocketsIdle       uint64 `json:"sockets_idle"`       // no event for IdleTimeout
	SocketsClosed     uint64 `json:"sockets_closed"`     // dropped ClosedLinger after closing (normal)
	EventsEvicted     uint64 `json:"events_evicted"`     // TCP events pushed out of a socket's history
	ActivityEvicted   uint64 `json:"activity_evicted"`   // activity intervals pushed out of a socket's history
	GoroutinesEvicted uint64 `json:"goroutines_evicted"` // MaxGoroutines reached, or their process evicted
	GoroutinesIdle    uint64 `json:"goroutines_idle"`
	BindingsEvicted   uint64 `json:"bindings_evicted"` // pushed out of a goroutine's history
	LocalEvicted      uint64 `json:"local_evicted"`    // local intervals pushed out of a process's history
	LocalInvalid      uint64 `json:"local_invalid"`    // local events with an unknown kind or a start after their end, ignored
	ProcessesEvicted  uint64 `json:"processes_evicted"`
	ProcessesIdle     uint64 `json:"processes_idle"`

	// Gauges at the time of the call.
	LiveSockets    int `json:"live_sockets"`
	LiveGoroutines int `json:"live_goroutines"`
	LiveProcesses  int `json:"live_processes"`
	Pending        int `json:"pending"`
}
