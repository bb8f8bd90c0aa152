package workload

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// FilterConfig lists what to trace and what not to. Each Include list that
// is not empty must be matched (any of its entries); a process matching any
// Exclude entry is skipped whatever the includes say.
type FilterConfig struct {
	// Executables: glob patterns (path.Match syntax). A pattern with a
	// '/' matches the executable's full path; one without matches its
	// base name or its comm.
	IncludeExe, ExcludeExe []string
	// Containers: container ID prefixes (lowercase hex, like "docker ps"
	// prints them).
	IncludeContainer, ExcludeContainer []string
	// Kubernetes namespaces, exact names.
	IncludeNamespace, ExcludeNamespace []string
	// Kubernetes pod names: glob patterns.
	IncludePod, ExcludePod []string
}

// Reasons Match gives. They are short and stable: use them as a log field
// and a metric label.
const (
	ReasonTraced            = "traced"             // no include list, nothing excluded
	ReasonIncluded          = "included"           // every include list that is set matched
	ReasonExcludedExe       = "excluded_exe"       // an ExcludeExe pattern matched
	ReasonExcludedContainer = "excluded_container" // an ExcludeContainer prefix matched
	ReasonExcludedNamespace = "excluded_namespace" // the pod's namespace is excluded
	ReasonExcludedPod       = "excluded_pod"       // the pod's name is excluded
	ReasonNotIncluded       = "not_included"       // some include list that is set did not match
)

// Filter decides which processes the node agent traces. Safe for
// concurrent use: it is never modified after NewFilter.
type Filter struct {
	cfg FilterConfig
}

// NewFilter checks every pattern and prefix and returns the filter.
func NewFilter(cfg FilterConfig) (*Filter, error) {
	for _, l := range []struct {
		flag string
		pats []string
	}{
		{"include-exe", cfg.IncludeExe}, {"exclude-exe", cfg.ExcludeExe},
		{"include-pod", cfg.IncludePod}, {"exclude-pod", cfg.ExcludePod},
	} {
		for _, p := range l.pats {
			if p == "" {
				return nil, fmt.Errorf("filter --%s: empty pattern", l.flag)
			}
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("filter --%s %q: %w (globs use * ? [a-z] and \\ to escape)", l.flag, p, err)
			}
		}
	}
	for _, l := range []struct {
		flag     string
		prefixes []string
	}{{"include-container", cfg.IncludeContainer}, {"exclude-container", cfg.ExcludeContainer}} {
		for _, p := range l.prefixes {
			if p == "" || len(p) > 64 || strings.TrimLeft(p, "0123456789abcdef") != "" {
				return nil, fmt.Errorf("filter --%s %q: want a container ID prefix, 1 to 64 lowercase hex digits", l.flag, p)
			}
		}
	}
	for _, l := range []struct {
		flag  string
		names []string
	}{{"include-namespace", cfg.IncludeNamespace}, {"exclude-namespace", cfg.ExcludeNamespace}} {
		for _, n := range l.names {
			if n == "" || strings.ContainsAny(n, "/*?[ ") {
				return nil, fmt.Errorf("filter --%s %q: want a Kubernetes namespace name (exact, no pattern)", l.flag, n)
			}
		}
	}
	return &Filter{cfg: cfg}, nil
}

// NeedsPod reports whether the filter looks at namespaces or pod names:
// then a process in a pod whose names are not known yet (the Kubernetes
// watch has not synced) should be matched again once they are.
func (f *Filter) NeedsPod() bool {
	c := f.cfg
	return len(c.IncludeNamespace)+len(c.ExcludeNamespace)+len(c.IncludePod)+len(c.ExcludePod) > 0
}

// Match reports whether to trace the process, and why as a stable token
// (the Reason constants). Excludes win over includes. A process outside any
// pod, or in a pod whose names are unknown, matches no namespace or pod
// entry: it is never excluded by one, and not included by one either.
func (f *Filter) Match(id Identity) (ok bool, reason string) {
	c := f.cfg
	switch {
	case anyExe(c.ExcludeExe, id):
		return false, ReasonExcludedExe
	case anyPrefix(c.ExcludeContainer, id.ContainerID):
		return false, ReasonExcludedContainer
	case id.Namespace != "" && slices.Contains(c.ExcludeNamespace, id.Namespace):
		return false, ReasonExcludedNamespace
	case id.Pod != "" && anyGlob(c.ExcludePod, id.Pod):
		return false, ReasonExcludedPod
	}
	set := false
	for _, inc := range []struct {
		n  int
		ok func() bool
	}{
		{len(c.IncludeExe), func() bool { return anyExe(c.IncludeExe, id) }},
		{len(c.IncludeContainer), func() bool { return anyPrefix(c.IncludeContainer, id.ContainerID) }},
		{len(c.IncludeNamespace), func() bool { return id.Namespace != "" && slices.Contains(c.IncludeNamespace, id.Namespace) }},
		{len(c.IncludePod), func() bool { return id.Pod != "" && anyGlob(c.IncludePod, id.Pod) }},
	} {
		if inc.n == 0 {
			continue
		}
		set = true
		if !inc.ok() {
			return false, ReasonNotIncluded
		}
	}
	if set {
		return true, ReasonIncluded
	}
	return true, ReasonTraced
}

func anyExe(pats []string, id Identity) bool {
	for _, p := range pats {
		if strings.Contains(p, "/") {
			if globMatch(p, id.Exe) {
				return true
			}
			continue
		}
		if globMatch(p, id.ExeName) || globMatch(p, id.Comm) {
			return true
		}
	}
	return false
}

func anyGlob(pats []string, s string) bool {
	for _, p := range pats {
		if globMatch(p, s) {
			return true
		}
	}
	return false
}

// globMatch: patterns were checked by NewFilter, so an error cannot occur.
func globMatch(pat, s string) bool {
	if s == "" {
		return false
	}
	ok, err := path.Match(pat, s)
	return err == nil && ok
}

func anyPrefix(prefixes []string, id string) bool {
	if id == "" {
		return false
	}
	for _, p := range prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}
