package goprobe

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/timeout-tracer/tracer/collector"
)

// objects are a node's loaded programs and maps.
type objects struct {
	godeadlineObjects
}

// load loads every program and map; multi makes the uprobes
// uprobe_multi programs (see collector.UprobeMulti).
func (o *objects) load(multi bool) error {
	spec, err := loadGodeadline()
	if err != nil {
		return fmt.Errorf("load Go BPF spec: %w", err)
	}
	if multi {
		collector.AsUprobeMulti(spec)
	}
	if err := spec.LoadAndAssign(&o.godeadlineObjects, nil); err != nil {
		return fmt.Errorf("load Go deadline programs: %w", collector.Explain(err))
	}
	return nil
}

// loaded reports whether load succeeded.
func (o *objects) loaded() bool { return o.GoProcs != nil }

// byTgid are the maps of per-process state keyed by tgid.
func (o *objects) byTgid() []*ebpf.Map { return []*ebpf.Map{o.GoProcs, o.GoGrpc, o.GoDial} }

// byPidPtr are the maps of per-process state keyed by {tgid, pointer}
// that userspace cleans when a process goes.
func (o *objects) byPidPtr() []*ebpf.Map {
	return []*ebpf.Map{o.GoCtxItabs, o.GoSpanTypes, o.Deadlines}
}

// programs are every loaded program.
func (o *objects) programs() []*ebpf.Program {
	p := &o.godeadlinePrograms
	return []*ebpf.Program{p.GoCreateEntry, p.GoCreateRet, p.GoDialEntry, p.GoDialRet, p.GoExpiredAtCreation,
		p.GoGrpcHeaders, p.GoGrpcNewStream, p.GoHttpHeader, p.GoHttpRequest, p.GoHttpRoundtrip, p.GoHttpRoundtripRet,
		p.GoNewprocEntry, p.GoNewprocRet, p.GoSpanStartRet, p.GoTimerFired}
}

// close frees the programs and maps (their links must be closed first).
func (o *objects) close() { o.godeadlineObjects.Close() }

// site is where one program is attached: a link-time address in the
// traced executable. name is the program's, for errors.
type site struct {
	name string
	prog *ebpf.Program
	addr uint64
}
