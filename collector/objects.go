package collector

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// Explain shortens verifier errors to their last lines and says what a
// refusal lacks; the full log is only useful to developers.
func Explain(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		if os.Getenv("TT_VERIFIER_LOG") != "" {
			// The whole log, for whoever changes the programs
			// (docs/development.md).
			fmt.Fprintf(os.Stderr, "%+v\n", ve)
		}
		return fmt.Errorf("verifier rejected the program: %v", fmt.Sprintf("%.300v", ve))
	}
	if errors.Is(err, os.ErrPermission) {
		caps, cerr := EffectiveCaps()
		if cerr != nil {
			caps = 0
		}
		return fmt.Errorf("%w (%s)", err, permissionHint(err, caps))
	}
	return err
}

// permissionHint says why err, a refusal, happened to a process holding
// caps: the capabilities it lacks, else what else refuses. Only a process
// lacking CAP_BPF or CAP_PERFMON is told to grant them.
func permissionHint(err error, caps Caps) string {
	if missing := caps.MissingToLoad(); missing != "" {
		return "run as root, or grant " + missing
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Path, "/sys/kernel/tracing") || strings.HasPrefix(pe.Path, "/sys/kernel/debug/tracing")) {
		// Measured: uid 65534 with CAP_BPF+CAP_PERFMON is refused, with
		// CAP_DAC_OVERRIDE too gets as far as root.
		return fmt.Sprintf("tracefs, through which kprobes are created, is root's (mode 0700) and this is uid %d: run as uid 0, or grant CAP_DAC_OVERRIDE", os.Geteuid())
	}
	held := "CAP_BPF and CAP_PERFMON are"
	if caps.Has(CapSysAdmin) {
		held = "CAP_SYS_ADMIN is"
	}
	return "refused although " + held + " held: kernel lockdown, a security module or a seccomp profile denies it"
}

// Replacements returns the maps of a bpf2go Maps struct (or a pointer to
// one, or an Objects struct embedding it) that spec declares too, by their
// BPF names (the struct's `ebpf` tags): the MapReplacements that make
// programs loaded later, or from another object, use the maps already
// created.
func Replacements(spec *ebpf.CollectionSpec, maps any) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		t := v.Type()
		for i := range t.NumField() {
			f, ft := v.Field(i), t.Field(i)
			switch {
			case ft.Type == reflect.TypeFor[*ebpf.Map]():
				// Through UnsafePointer: bpf2go embeds its Maps struct
				// unexported, whose fields reflect will not Interface.
				m := (*ebpf.Map)(f.UnsafePointer())
				if name := ft.Tag.Get("ebpf"); name != "" && m != nil && spec.Maps[name] != nil {
					out[name] = m
				}
			case ft.Anonymous && f.Kind() == reflect.Struct:
				walk(f)
			}
		}
	}
	walk(reflect.ValueOf(maps))
	return out
}

// LoadProgram loads the one program ps of spec against maps already
// created (a bpf2go Maps struct, see Replacements), leaving the spec's
// other programs unloaded: a program this kernel refuses does not keep
// the others from loading. The error is the loader's, for the caller to
// wrap (and Explain).
func LoadProgram(spec *ebpf.CollectionSpec, ps *ebpf.ProgramSpec, maps any) (*ebpf.Program, error) {
	cs := spec.Copy()
	for name := range cs.Programs {
		if name != ps.Name {
			delete(cs.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{MapReplacements: Replacements(cs, maps)})
	if err != nil {
		return nil, err
	}
	prog := coll.DetachProgram(ps.Name)
	coll.Close()
	if prog == nil {
		return nil, errMissingProgram
	}
	return prog, nil
}

var errMissingProgram = errors.New("program missing from collection")

// UprobeMulti says whether uprobes are attached as uprobe_multi BPF
// links (Linux 6.6+) rather than perf events. Since the 2025 fix "perf/core:
// Require CAP_SYS_ADMIN for uprobes" (in 6.16 and stable kernels), a perf
// uprobe needs CAP_SYS_ADMIN; a uprobe_multi link needs only CAP_BPF and
// CAP_PERFMON, so the node agent runs without CAP_SYS_ADMIN where the kernel
// has it. TT_UPROBE=perf forces perf events (tests, comparisons).
func UprobeMulti() bool {
	if os.Getenv("TT_UPROBE") == "perf" {
		return false
	}
	return features.HaveBPFLinkUprobeMulti() == nil
}

// AsUprobeMulti makes the uprobe programs of spec load as uprobe_multi
// programs (see UprobeMulti).
func AsUprobeMulti(spec *ebpf.CollectionSpec) {
	for _, ps := range spec.Programs {
		if ps.Type == ebpf.Kprobe {
			ps.AttachType = ebpf.AttachTraceUprobeMulti
		}
	}
}

// Counters reads the per-CPU array m of counters: dst[i] is the sum over
// CPUs of entry i.
func Counters(m *ebpf.Map, dst ...*uint64) error {
	for i, d := range dst {
		var perCPU []uint64
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return err
		}
		for _, v := range perCPU {
			*d += v
		}
	}
	return nil
}

// Missed sums the runs the kernel skipped of each program (its recursion
// guard: the program was already running on that CPU).
func Missed(progs ...*ebpf.Program) (uint64, error) {
	var n uint64
	for _, p := range progs {
		if p == nil {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			return n, err
		}
		n += st.RecursionMisses
	}
	return n, nil
}

// EnableRunStats makes the kernel count BPF program runs and run time
// (kernel.bpf_stats_enabled) until the returned Closer is closed. It costs a
// little on every run: benchmarks only.
func EnableRunStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}
