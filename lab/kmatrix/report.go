package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// checkResult is one KMATRIX check line.
type checkResult struct {
	Name, Result, Detail string
	Secs                 string // how long the check took
}

// hookResult is one KMATRIX hook line: how a tracepoint was attached.
type hookResult struct {
	Tracepoint, Mode, Type, Detail string
}

// run is what one kernel (a guest or the host) reported.
type run struct {
	Label   string // column header: upstream version and arch
	Where   string // "qemu" or "host"
	Release string // uname -r, from the guest itself
	Arch    string
	Checks  []checkResult
	Hooks   []hookResult
	Done    bool // the KMATRIX-DONE marker arrived
	Exit    int
	Err     error // boot failure, timeout, missing marker
	Elapsed time.Duration
	Log     string // the console log
}

// parseLine takes one console line; anything that is not a KMATRIX line
// (kernel messages, a test program's output) is ignored, and so is what
// precedes the marker on the same line.
func (r *run) parseLine(line string) {
	i := strings.Index(line, "KMATRIX")
	if i < 0 {
		return
	}
	line = strings.TrimRight(line[i:], "\r\n ")
	if rest, ok := strings.CutPrefix(line, "KMATRIX-DONE "); ok {
		f, _ := fields(rest)
		if n, err := strconv.Atoi(f["exit"]); err == nil {
			r.Done, r.Exit = true, n
		}
		return
	}
	rest, ok := strings.CutPrefix(line, "KMATRIX ")
	if !ok {
		return
	}
	f, err := fields(rest)
	if err != nil {
		return
	}
	switch {
	case f["check"] != "":
		r.Checks = append(r.Checks, checkResult{Name: f["check"], Result: f["result"], Detail: f["detail"], Secs: f["secs"]})
	case f["hook"] != "":
		r.Hooks = append(r.Hooks, hookResult{Tracepoint: f["hook"], Mode: f["mode"], Type: f["type"], Detail: f["detail"]})
	case strings.HasPrefix(rest, "info "):
		r.Release, r.Arch = f["release"], f["arch"]
	}
}

// fields splits `k=v k2="quoted \"v\""` into a map; the first token may
// be a bare word (it maps to "").
func fields(s string) (map[string]string, error) {
	out := map[string]string{}
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		tok, _, _ := strings.Cut(s, " ")
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			out[tok] = ""
			s = s[len(tok):]
			continue
		}
		s = s[len(k)+1:]
		if strings.HasPrefix(v, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return out, fmt.Errorf("field %s: %w", k, err)
			}
			v, _ = strconv.Unquote(q)
			s = s[len(q):]
		} else {
			s = s[len(v):]
		}
		out[k] = v
	}
	return out, nil
}

// failed says whether the run has anything but passes, or no checks at all.
func (r *run) failed() bool {
	if r.Err != nil || !r.Done || r.Exit != 0 || len(r.Checks) == 0 {
		return true
	}
	for _, c := range r.Checks {
		if !c.ok() {
			return true
		}
	}
	return false
}

// ok: passed, or showed a limitation of the kernel that is documented
// ("known"); anything else is a failure.
func (c checkResult) ok() bool { return c.Result == "pass" || c.Result == "known" }

// finish sets Err when the run ended without its marker.
func (r *run) finish(err error) {
	switch {
	case err != nil:
		r.Err = err
	case !r.Done:
		r.Err = errors.New("no KMATRIX-DONE marker: the guest crashed or hung (see the log)")
	}
}

// printTable prints check × kernel and hook × kernel, then the details of
// whatever failed (all details with verbose).
func printTable(w io.Writer, runs []*run, verbose bool) {
	var checks, hooks []string
	for _, r := range runs {
		for _, c := range r.Checks {
			if !slices.Contains(checks, c.Name) {
				checks = append(checks, c.Name)
			}
		}
		for _, h := range r.Hooks {
			if h.Mode == "auto" && !slices.Contains(hooks, h.Tracepoint) {
				hooks = append(hooks, h.Tracepoint)
			}
		}
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := func(first string) {
		fmt.Fprint(tw, first)
		for _, r := range runs {
			fmt.Fprintf(tw, "\t%s", r.Label)
		}
		fmt.Fprintln(tw)
		fmt.Fprint(tw, "")
		for _, r := range runs {
			fmt.Fprintf(tw, "\t%s %s", r.Where, r.Elapsed.Round(time.Second))
		}
		fmt.Fprintln(tw)
	}
	header("CHECK")
	for _, name := range checks {
		fmt.Fprint(tw, name)
		for _, r := range runs {
			fmt.Fprintf(tw, "\t%s", r.result(name))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "(run)")
	for _, r := range runs {
		s := "ok"
		if r.Err != nil {
			s = "FAIL"
		}
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprintln(tw)
	if len(hooks) > 0 {
		fmt.Fprintln(tw)
		header("HOOK (auto)")
	}
	for _, tp := range hooks {
		fmt.Fprint(tw, tp)
		for _, r := range runs {
			fmt.Fprintf(tw, "\t%s", r.hookType("auto", tp))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	for _, r := range runs {
		var lines []string
		if r.Err != nil {
			lines = append(lines, "run: "+r.Err.Error())
		}
		for _, c := range r.Checks {
			if verbose || c.Result != "pass" {
				lines = append(lines, fmt.Sprintf("%s: %s (%ss): %s", c.Name, c.Result, c.Secs, c.Detail))
			}
		}
		for _, h := range r.Hooks {
			if h.Mode == "auto" && h.Detail != "" && (verbose || h.Type != "skipped") {
				lines = append(lines, fmt.Sprintf("hook %s: %s: %s", h.Tracepoint, h.Type, h.Detail))
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s, %s; log %s):\n", r.Label, r.Release, r.Where, r.Log)
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

func (r *run) result(check string) string {
	for _, c := range r.Checks {
		if c.Name == check {
			if c.ok() {
				return c.Result
			}
			return "FAIL"
		}
	}
	return "-"
}

func (r *run) hookType(mode, tp string) string {
	for _, h := range r.Hooks {
		if h.Mode == mode && h.Tracepoint == tp {
			return h.Type
		}
	}
	return "-"
}
