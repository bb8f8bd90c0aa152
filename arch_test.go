package tracer_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layer order of the product, asserted from the import graph:
//
//	event, tick, gobin, workload plain values, timer instants, binary analysis, process identity
//	sample                       samplers without BPF (cgroup CPU throttling)
//	collector                    the kernel side: the only product code that touches cilium/ebpf
//	                             (it no longer imports workload: identity is the caller's)
//	record, correlate            event files and the join: pure, replayable, no BPF
//	export                       OTLP, Prometheus, CLI writers: on reports, no BPF
//	pipeline                     wiring of sources, join and sinks
//	cmd                          flags and wiring only
//	tools                        build tooling (the image builder)
//
// and the labs (lab/, bench/) apart: product code never imports them.
const module = "github.com/timeout-tracer/tracer"

// allowed says, per product package (prefix match on the path below the
// module), which of the module's packages it may import directly.
var allowed = []layer{
	{pkg: "event", may: nil, noBPF: true},
	{pkg: "tick", may: nil, noBPF: true},
	{pkg: "gobin", may: []string{"gobin"}},
	{pkg: "workload", may: []string{"workload"}, noBPF: true},
	{pkg: "record", may: []string{"event"}, noBPF: true},
	{pkg: "correlate", may: []string{"event"}, noBPF: true},
	{pkg: "export", may: []string{"event", "correlate", "workload"}, noBPF: true},
	{pkg: "sample", may: []string{"event", "tick"}, noBPF: true},
	{pkg: "collector", may: []string{"collector", "event", "gobin", "tick"}},
	{pkg: "pipeline", may: []string{"pipeline", "collector", "sample", "tick", "event", "gobin", "workload", "correlate", "record", "export"}},
	{pkg: "deploy", may: nil, noBPF: true},
	{pkg: "tools", may: []string{"deploy"}},
	{pkg: "cmd", may: []string{"collector", "sample", "tick", "event", "gobin", "workload", "correlate", "record", "export", "pipeline", "deploy"}},
}

type layer struct {
	pkg   string
	may   []string
	noBPF bool // neither it nor anything it depends on may use cilium/ebpf
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Standard   bool
}

func goList(t *testing.T, args ...string) []listed {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not in PATH: cannot list the import graph")
	}
	cmd := exec.Command(goBin, append([]string{"list", "-json"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func TestLayers(t *testing.T) {
	pkgs := goList(t, "-deps=false", "./...")
	if len(pkgs) < 15 {
		t.Fatalf("implausibly few packages: %d", len(pkgs))
	}
	checked := 0
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		if under(rel, "lab") || under(rel, "bench") {
			continue // labs may import anything
		}
		i := slices.IndexFunc(allowed, func(a layer) bool { return under(rel, a.pkg) })
		if i < 0 {
			t.Errorf("%s: a product package in no layer: add it to the architecture test", rel)
			continue
		}
		checked++
		rule := allowed[i]
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/cilium/ebpf") && rule.pkg != "collector" {
				t.Errorf("%s imports %s: only collector/ touches cilium/ebpf", rel, imp)
			}
			irel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if under(irel, "lab") || under(irel, "bench") {
				t.Errorf("%s imports the lab package %s", rel, irel)
				continue
			}
			if !slices.ContainsFunc(rule.may, func(m string) bool { return under(irel, m) }) {
				t.Errorf("%s imports %s: against the layer order (it may import %v)", rel, irel, rule.may)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d product packages checked", checked)
	}
}

// The pure layers stay pure through their whole dependency tree: they run
// and are tested without root, on recordings and plain values.
func TestPureLayersHaveNoBPF(t *testing.T) {
	var roots []string
	for _, a := range allowed {
		if a.noBPF {
			roots = append(roots, "./"+a.pkg+"/...")
		}
	}
	pkgs := goList(t, roots...)
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module+"/") {
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, "github.com/cilium/ebpf") || under(d, module+"/collector") {
				t.Errorf("%s depends on %s", p.ImportPath, d)
			}
		}
	}
}
