package goprobe

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/timeout-tracer/tracer/collector"
)

// objects are a node's loaded programs and maps: three objects, one per
// family of probes (gen.go), sharing the maps of bpf/include/go_maps.h.
type objects struct {
	// The shared maps, created with this object, and the deadline probes
	// (expiries, creations, child spans).
	godeadlineObjects
	calls       gocallsObjects       // outbound calls, their connections, dials
	traceparent gotraceparentObjects // inbound trace context, goroutine ancestry
}

// load loads every program and map: the deadline object first, then the
// others against its maps. multi makes the uprobes uprobe_multi programs
// (see collector.UprobeMulti). On error, what was loaded stays for close.
func (o *objects) load(multi bool) error {
	var specs [3]*ebpf.CollectionSpec
	var err error
	for i, load := range []func() (*ebpf.CollectionSpec, error){loadGodeadline, loadGocalls, loadGotraceparent} {
		if specs[i], err = load(); err != nil {
			return fmt.Errorf("load Go BPF spec: %w", err)
		}
		if multi {
			collector.AsUprobeMulti(specs[i])
		}
	}
	cache := btf.NewCache() // the kernel's BTF, decoded once for the three
	if err := specs[0].LoadAndAssign(&o.godeadlineObjects, &ebpf.CollectionOptions{Cache: cache}); err != nil {
		return fmt.Errorf("load Go deadline programs: %w", collector.Explain(err))
	}
	for _, f := range []struct {
		what string
		spec *ebpf.CollectionSpec
		objs any
	}{{"call", specs[1], &o.calls}, {"traceparent", specs[2], &o.traceparent}} {
		opts := &ebpf.CollectionOptions{Cache: cache, MapReplacements: collector.Replacements(f.spec, &o.godeadlineMaps)}
		if err := f.spec.LoadAndAssign(f.objs, opts); err != nil {
			return fmt.Errorf("load Go %s programs: %w", f.what, collector.Explain(err))
		}
	}
	return nil
}

// loaded reports whether load succeeded.
func (o *objects) loaded() bool { return o.traceparent.GoHttpRequest != nil }

// byTgid are the maps of per-process state keyed by tgid.
func (o *objects) byTgid() []*ebpf.Map {
	return []*ebpf.Map{o.GoProcs, o.GoGrpc, o.calls.GoDial, o.GoConns}
}

// byPidPtr are the maps of per-process state keyed by {tgid, pointer}
// that userspace cleans when a process goes.
func (o *objects) byPidPtr() []*ebpf.Map {
	return []*ebpf.Map{o.GoCtxItabs, o.GoSpanTypes, o.Deadlines}
}

// programs are every loaded program.
func (o *objects) programs() []*ebpf.Program {
	d, c, t := &o.godeadlinePrograms, &o.calls.gocallsPrograms, &o.traceparent.gotraceparentPrograms
	return []*ebpf.Program{d.GoCreateEntry, d.GoCreateRet, d.GoExpiredAtCreation, d.GoSpanStartRet, d.GoTimerFired, d.GoClientTimer, d.GoGrpcTimer, d.GoDialTimer,
		c.GoDialEntry, c.GoDialRet, c.GoGrpcNewStream, c.GoHttpRoundtrip, c.GoHttpRoundtripRet, c.GoH2Roundtrip, c.GoXh2Roundtrip,
		t.GoGrpcHeaders, t.GoHttpHeader, t.GoHttpRequest, t.GoHttpConnRequest, t.GoNewprocEntry, t.GoNewprocRet}
}

// close frees the programs and maps (their links must be closed first):
// the objects loaded against the shared maps, then the one that made them.
func (o *objects) close() {
	o.traceparent.Close()
	o.calls.Close()
	o.godeadlineObjects.Close()
}

// site is where one program is attached: a link-time address in the
// traced executable. name is the program's, for errors.
type site struct {
	name string
	prog *ebpf.Program
	addr uint64
}
