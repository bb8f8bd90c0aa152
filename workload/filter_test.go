package workload

import (
	"strings"
	"testing"
)

func TestFilterMatch(t *testing.T) {
	api := Identity{Exe: "/app/bin/api-server", ExeName: "api-server", Comm: "api-server",
		Container: Container{ContainerID: cid, PodUID: uid}, Namespace: "shop", Pod: "api-7d9f8-x2x4q"}
	node := Identity{Exe: "/usr/local/bin/node_exporter", ExeName: "node_exporter", Comm: "node_exporter"}
	renamed := Identity{Exe: "/usr/bin/python3.11", ExeName: "python3.11", Comm: "worker"}
	unnamed := Identity{Exe: "/app/bin/api-server", ExeName: "api-server", Container: Container{ContainerID: cid2, PodUID: uid}}

	for _, tc := range []struct {
		name   string
		cfg    FilterConfig
		id     Identity
		ok     bool
		reason string
	}{
		{"no filter", FilterConfig{}, api, true, ReasonTraced},
		{"include exe by name", FilterConfig{IncludeExe: []string{"api-*"}}, api, true, ReasonIncluded},
		{"include exe by path", FilterConfig{IncludeExe: []string{"/app/bin/*"}}, api, true, ReasonIncluded},
		{"path glob does not match the name", FilterConfig{IncludeExe: []string{"/usr/*/api-server"}}, api, false, ReasonNotIncluded},
		{"include exe by comm", FilterConfig{IncludeExe: []string{"worker"}}, renamed, true, ReasonIncluded},
		{"not included", FilterConfig{IncludeExe: []string{"api-*"}}, node, false, ReasonNotIncluded},
		{"exclude exe", FilterConfig{ExcludeExe: []string{"node_*"}}, node, false, ReasonExcludedExe},
		{"exclude wins over include", FilterConfig{IncludeExe: []string{"*"}, ExcludeExe: []string{"api-server"}}, api, false, ReasonExcludedExe},
		{"exclude container prefix", FilterConfig{ExcludeContainer: []string{cid[:12]}}, api, false, ReasonExcludedContainer},
		{"include container prefix", FilterConfig{IncludeContainer: []string{cid[:12]}}, api, true, ReasonIncluded},
		{"container filter, process outside containers", FilterConfig{IncludeContainer: []string{cid[:12]}}, node, false, ReasonNotIncluded},
		{"exclude container does not hit the host", FilterConfig{ExcludeContainer: []string{"4c"}}, node, true, ReasonTraced},
		{"exclude namespace", FilterConfig{ExcludeNamespace: []string{"kube-system", "shop"}}, api, false, ReasonExcludedNamespace},
		{"include namespace", FilterConfig{IncludeNamespace: []string{"shop"}}, api, true, ReasonIncluded},
		{"include namespace, names unknown yet", FilterConfig{IncludeNamespace: []string{"shop"}}, unnamed, false, ReasonNotIncluded},
		{"exclude namespace, names unknown yet", FilterConfig{ExcludeNamespace: []string{"shop"}}, unnamed, true, ReasonTraced},
		{"exclude pod glob", FilterConfig{ExcludePod: []string{"api-*"}}, api, false, ReasonExcludedPod},
		{"include pod glob", FilterConfig{IncludePod: []string{"api-*"}}, api, true, ReasonIncluded},
		{"every include list set must match", FilterConfig{IncludeExe: []string{"api-*"}, IncludeNamespace: []string{"payments"}}, api, false, ReasonNotIncluded},
		{"every include list matches", FilterConfig{IncludeExe: []string{"api-*"}, IncludeNamespace: []string{"shop"}, IncludePod: []string{"api-*"}}, api, true, ReasonIncluded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFilter(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if ok, reason := f.Match(tc.id); ok != tc.ok || reason != tc.reason {
				t.Errorf("Match = %v %q, want %v %q", ok, reason, tc.ok, tc.reason)
			}
		})
	}
}

func TestFilterNeedsPod(t *testing.T) {
	for _, tc := range []struct {
		cfg  FilterConfig
		want bool
	}{
		{FilterConfig{IncludeExe: []string{"x"}, ExcludeContainer: []string{"ab"}}, false},
		{FilterConfig{ExcludeNamespace: []string{"kube-system"}}, true},
		{FilterConfig{IncludePod: []string{"api-*"}}, true},
	} {
		f, err := NewFilter(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.NeedsPod(); got != tc.want {
			t.Errorf("%+v: NeedsPod = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

func TestNewFilterRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  FilterConfig
		want string
	}{
		{FilterConfig{IncludeExe: []string{"[a-"}}, "--include-exe"},
		{FilterConfig{ExcludePod: []string{""}}, "empty pattern"},
		{FilterConfig{IncludeContainer: []string{"ABC"}}, "lowercase hex"},
		{FilterConfig{ExcludeContainer: []string{cid + "0"}}, "1 to 64"},
		{FilterConfig{IncludeNamespace: []string{"kube-*"}}, "exact, no pattern"},
	} {
		if _, err := NewFilter(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewFilter(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}
