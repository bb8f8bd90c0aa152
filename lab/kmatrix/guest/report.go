package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// reporter prints the lines the driver parses, one write per line so that
// kernel messages on the same console cannot split one.
type reporter struct {
	mu     sync.Mutex
	w      io.Writer
	failed bool
	last   time.Time // end of the previous check: each check's line says how long it took
	only   []string  // the checks to run; all when empty
}

func newReporter(w io.Writer, only string) *reporter {
	r := &reporter{w: w, last: time.Now()}
	for _, c := range strings.Split(only, ",") {
		if c = strings.TrimSpace(c); c != "" {
			r.only = append(r.only, c)
		}
	}
	return r
}

// wants says whether the check is to run (and be reported).
func (r *reporter) wants(check string) bool {
	return len(r.only) == 0 || slices.Contains(r.only, check)
}

func (r *reporter) line(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "\nKMATRIX "+format+"\n", args...)
}

// info names the kernel and architecture the checks ran on.
func (r *reporter) info(release, arch string) {
	r.line("info release=%s arch=%s", strconv.Quote(release), arch)
}

// check reports one check: it passed when err is nil. A check left out
// with -checks is not reported (attach checks run for the rto checks).
func (r *reporter) check(name string, err error, detail string) {
	if !r.wants(name) && name != "init" {
		r.last = time.Now()
		return
	}
	result := "pass"
	if err != nil {
		result = "fail"
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
		if detail != "" {
			detail = err.Error() + "; " + detail
		} else {
			detail = err.Error()
		}
	}
	took := time.Since(r.last)
	r.last = time.Now()
	r.line("check=%s result=%s secs=%.1f detail=%s", name, result, took.Seconds(), strconv.Quote(detail))
}

// known reports a check that shows a documented limitation of this kernel:
// not a failure, but not to be mistaken for a pass either.
func (r *reporter) known(name, detail string) {
	if !r.wants(name) {
		return
	}
	took := time.Since(r.last)
	r.last = time.Now()
	r.line("check=%s result=known secs=%.1f detail=%s", name, took.Seconds(), strconv.Quote(detail))
}

// hook reports how one tracepoint was attached in one mode.
func (r *reporter) hook(mode, tracepoint, typ, detail string) {
	r.line("hook=%s mode=%s type=%s detail=%s", tracepoint, mode, typ, strconv.Quote(detail))
}
