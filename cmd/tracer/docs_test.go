package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/pipeline"
)

// The documentation shows command lines people copy. These tests run every
// `tracer ...` line of README.md and docs/*.md through the CLI's real
// command tree and flag parsing (newRootCommand, cobra's Find and
// ParseFlags, never RunE), and check every `make X` against the Makefile's
// targets, so a renamed flag, a typo or a removed target fails here with
// the file and line instead of in a reader's terminal.
//
// What counts as a command line:
//   - in fenced blocks marked sh, shell, bash, console or unmarked, every
//     line (a trailing `\` joins the next; an indented line starting with
//     `[` continues a synopsis); output goes in blocks marked text;
//   - outside fences, every inline code span (one of command names alone,
//     `tracer replay` in a sentence, must name a command but need not have
//     its arguments);
//
// and in either, each part of a pipeline or list (`|`, `&&`, `||`, `;`,
// `&`), redirections dropped, whose command word, after `sudo`, `env`,
// VAR=value, `ip netns exec NS`, `setsid`, `nohup` or `time`, is `tracer`
// or a path to it (`./bin/tracer`, `bin/tracer`; not the package path
// `cmd/tracer`), or `make`.
//
// Synopsis notation is understood: `[` and `]` are dropped, `...` ignored,
// `a|b` as a flag's value is tried with each alternative, and placeholders
// (upper-case words such as N, PID, FILE, D; <pid>; $VAR, $!, $(...))
// become a value of the flag's type: 4242 for numbers, 10s for durations,
// x for strings (so a placeholder for an enum flag fails: document its
// values). A flag whose value the command validates itself (output
// formats, --detail, --local, --otlp-protocol, --log-level, --log-format,
// --peer) is checked with the command's own validator. `make X` with a
// placeholder names no target.

// docProblem is one command line of a document that does not work.
type docProblem struct {
	line int
	cmd  string
	err  string
}

func (p docProblem) String() string { return fmt.Sprintf("%d: %s: %s", p.line, p.cmd, p.err) }

// docCommand is one tracer or make invocation found in a document.
type docCommand struct {
	line   int
	words  []string // from the command word on
	text   string   // as written, for messages
	inline bool     // an inline code span, not a line of a block
}

// TestDocsCommands checks every tracer and make command line of README.md
// and docs/*.md.
func TestDocsCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	targets := makeTargets(t, filepath.Join(root, "Makefile"))

	var tracerCmds, makeCmds int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmds := docCommands(string(data))
		for _, c := range cmds {
			if isMake(c.words) {
				makeCmds++
			} else {
				tracerCmds++
			}
		}
		rel, _ := filepath.Rel(root, f)
		for _, p := range checkDocCommands(cmds, targets) {
			t.Errorf("%s:%s", rel, p)
		}
	}
	// The extractor must have found something: a parser that sees no
	// command would pass any document.
	if tracerCmds < 20 || makeCmds < 5 {
		t.Errorf("found only %d tracer and %d make command lines in %d files: is the extractor broken?", tracerCmds, makeCmds, len(files))
	}
	t.Logf("%d files: %d tracer and %d make command lines checked", len(files), tracerCmds, makeCmds)
}

// TestDocsSetupMatchesCI: the README's Setup block holds the two commands
// people and CI run, and CI (.ci/run) really runs the test one.
func TestDocsSetupMatchesCI(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	setup := regexp.MustCompile("(?s)## Setup.*?```sh\n(.*?)```").FindSubmatch(readme)
	if setup == nil {
		t.Fatal("README.md has no Setup section with a sh block")
	}
	for _, want := range []string{"make build && ./bin/tracer tcp", "make deps test"} {
		if !strings.Contains(string(setup[1]), want) {
			t.Errorf("README Setup block lacks %q:\n%s", want, setup[1])
		}
	}
	if !regexp.MustCompile(`(?m)^step test;\s+make deps test$`).Match(ci) {
		t.Error(".ci/run no longer runs `make deps test`: the README's Setup says it does")
	}
}

// TestDocsCheckerCatches proves the checker fails on what it must catch,
// and passes what it must pass, with the right line numbers.
func TestDocsCheckerCatches(t *testing.T) {
	doc := "# A doc\n" + // 1
		"```sh\n" + // 2
		"sudo ./bin/tracer trace --pid N --no-such-flag\n" + // 3: unknown flag
		"tracer trcae --pid 1\n" + // 4: unknown command
		"tracer trace --pid PID -o yaml\n" + // 5: invalid enum value
		"make no-such-target\n" + // 6: not a Makefile target
		"tracer tcp --pid N | jq . && make build\n" + // 7: fine
		"tracer trace --pid N --duration D --detail always   # comment --bogus\n" + // 8: fine
		"tracer trace --pid notanumber\n" + // 9: bad int
		"```\n" + // 10
		"Run `tracer replay FILE -o json` or `bin/tracer record --pid <pid> -o out.events`.\n" + // 11: fine
		"Then `tracer daemon --detail sometimes` fails, `tracer replay -o json` needs its FILE, `tracer replay` is a name.\n" + // 12: two problems
		"```\n" + // 13
		"tracer tcp [--pid N] [--peer CIDR] [-o table|json] [--lifecycle]\n" + // 14: fine
		"tracer daemon [--otlp ...] [-o json|table|nope]\n" + // 15: one bad alternative
		"tracer trace --pid N [--otlp [--otlp-endpoint E]\n" + // 16: continues on 17
		"             [--otlp-protocol grpc|http/protobuf] [--otlp-insecur]]\n" + // 17: (reported on 16)
		"make deps test && ip netns exec ttdoc-cli ./bin/tracer tcp --duration 5s\n" + // 18: fine
		"```\n" + // 19
		"```text\n" + // 20
		"tracer f591a20 (output, not a command)\n" + // 21: not checked
		"```\n" + // 22
		"`tracer tcp --pid N --peer 10.0.0.0/8` and `tracer tcp --peer 10.0.0.0/33`\n" + // 23: one of each
		"```sh\n" + // 24
		"./bin/tracer tcp --duration 5s > /tmp/out 2>&1 & sleep 1; make X\n" + // 25: fine
		"bin/tracer tcp --pid $! 2> err & ./bin/tracer tcp --pidd 1 >>out\n" + // 26: the second is wrong
		"```\n" // 27
	targets := map[string]bool{"build": true, "deps": true, "test": true}
	problems := checkDocCommands(docCommands(doc), targets)
	got := map[int][]string{}
	for _, p := range problems {
		got[p.line] = append(got[p.line], p.err)
	}
	want := map[int]string{ // line → a word of the error, or "" when it must pass
		3: "unknown flag", 4: "unknown command", 5: "yaml", 6: "no-such-target", 7: "", 8: "",
		9: "notanumber", 11: "", 14: "", 15: "nope", 16: "otlp-insecur", 18: "", 21: "",
		25: "", 26: "pidd",
	}
	for line, word := range want {
		errs := got[line]
		switch {
		case word == "" && len(errs) > 0:
			t.Errorf("line %d: want no problem, got %q", line, errs)
		case word != "" && len(errs) != 1:
			t.Errorf("line %d: want one problem mentioning %q, got %q", line, word, errs)
		case word != "" && !strings.Contains(errs[0], word):
			t.Errorf("line %d: problem %q does not mention %q", line, errs[0], word)
		}
	}
	// Line 12: two of three spans wrong; line 23: the one with a /33.
	if len(got[12]) != 2 {
		t.Errorf("line 12: want two problems (bad --detail, replay without FILE), got %q", got[12])
	}
	if len(got[23]) != 1 || !strings.Contains(got[23][0], "10.0.0.0/33") {
		t.Errorf("line 23: want one problem about 10.0.0.0/33, got %q", got[23])
	}
	for line := range got {
		if _, ok := want[line]; !ok && line != 12 && line != 23 {
			t.Errorf("line %d: unexpected problem %q", line, got[line])
		}
	}
}

var (
	fenceRe       = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_-]*)")
	inlineCodeRe  = regexp.MustCompile("`([^`]+)`")
	placeholderRe = regexp.MustCompile(`^([A-Z][A-Z0-9_]*|<[^>]+>|\$.*|"\$.*)$`)
	assignRe      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	redirectRe    = regexp.MustCompile(`^[0-9]*(?:&?>>?|<)(&[0-9-]+|\S*)$`)
)

// shellFences are the info strings of fenced blocks whose lines are
// commands.
var shellFences = map[string]bool{"": true, "sh": true, "shell": true, "bash": true, "console": true}

// docCommands extracts the tracer and make invocations of a markdown text.
func docCommands(text string) []docCommand {
	var out []docCommand
	add := func(line int, s string, inline bool) {
		for _, seg := range shellSegments(s) {
			words := commandWords(seg)
			if len(words) > 0 && (isTracer(words[0]) || isMake(words)) {
				out = append(out, docCommand{line: line, words: words, text: strings.TrimSpace(strings.Join(seg, " ")), inline: inline})
			}
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		n         int
		fence     string // the open fence's marker, "" outside
		shell     bool
		pending   string // a command line being continued
		pendingAt int
	)
	flush := func() {
		if pending != "" {
			add(pendingAt, pending, false)
		}
		pending = ""
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			if fence == "" {
				fence, shell = m[1], shellFences[strings.ToLower(m[2])]
				continue
			}
			if strings.HasPrefix(m[1], fence) && m[2] == "" {
				flush()
				fence = ""
				continue
			}
		}
		if fence == "" {
			for _, m := range inlineCodeRe.FindAllStringSubmatch(line, -1) {
				add(n, m[1], true)
			}
			continue
		}
		if !shell {
			continue
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case pending != "" && strings.HasSuffix(pending, "\\"):
			pending = strings.TrimSuffix(pending, "\\") + " " + trimmed
		case pending != "" && strings.HasPrefix(trimmed, "[") && line != trimmed:
			pending += " " + trimmed
		default:
			flush()
			pending, pendingAt = strings.TrimPrefix(trimmed, "$ "), n
		}
	}
	flush()
	return out
}

// shellSegments splits a command line into the words of each simple
// command of its pipelines and lists. Quotes group words (and are kept);
// `$(...)` is one word; `#` at a word's start ends the line. A `|` with a
// space on either side is a pipe; inside a word it separates alternatives.
func shellSegments(s string) [][]string {
	var (
		segs  [][]string
		words []string
		word  strings.Builder
		inW   bool
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
		}
		word.Reset()
		inW = false
	}
	endSeg := func() {
		endWord()
		if len(words) > 0 {
			segs = append(segs, words)
		}
		words = nil
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(rs) && rs[j] != c {
				j++
			}
			word.WriteString(string(rs[i:min(j+1, len(rs))]))
			inW = true
			i = j
		case c == '$' && i+1 < len(rs) && rs[i+1] == '(':
			depth, j := 0, i+1
			for ; j < len(rs); j++ {
				if rs[j] == '(' {
					depth++
				} else if rs[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			word.WriteString(string(rs[i:min(j+1, len(rs))]))
			inW = true
			i = j
		case c == '#' && !inW:
			endSeg()
			return segs
		case c == ' ' || c == '\t':
			endWord()
		case c == ';':
			endSeg()
		case c == '&' && i+1 < len(rs) && rs[i+1] == '&', c == '|' && i+1 < len(rs) && rs[i+1] == '|':
			endSeg()
			i++
		case c == '&' && !(i > 0 && rs[i-1] == '>') && !(i+1 < len(rs) && rs[i+1] == '>'):
			endSeg() // a background job; not 2>&1 or &>file
		case c == '|':
			spaced := (i > 0 && (rs[i-1] == ' ' || rs[i-1] == '\t')) || i+1 == len(rs) || rs[i+1] == ' ' || rs[i+1] == '\t'
			if spaced || !inW {
				endSeg()
			} else {
				word.WriteRune(c)
			}
		default:
			word.WriteRune(c)
			inW = true
		}
	}
	endSeg()
	return segs
}

// commandWords drops what runs a command (sudo, env, assignments, ip netns
// exec NS, ...) and the synopsis brackets, and returns the rest from the
// command word on.
func commandWords(seg []string) []string {
	var words []string
	for i := 0; i < len(seg); i++ {
		w := strings.Trim(seg[i], "[]")
		if m := redirectRe.FindStringSubmatch(w); m != nil && !placeholderRe.MatchString(w) { // not <pid>
			if m[1] == "" {
				i++ // `> file`: the file is the next word
			}
			continue
		}
		if w == "" || w == "..." || w == "…" {
			continue
		}
		words = append(words, w)
	}
	for len(words) > 0 {
		switch w := words[0]; {
		case w == "sudo" || w == "env" || w == "setsid" || w == "nohup" || w == "time" || w == "exec":
			words = words[1:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") { // sudo -E
				words = words[1:]
			}
		case assignRe.MatchString(w):
			words = words[1:]
		case w == "ip" && len(words) >= 4 && words[1] == "netns" && words[2] == "exec":
			words = words[4:]
		default:
			return words
		}
	}
	return nil
}

// isTracer: the tracer binary by name or by a path to it (./bin/tracer,
// bin/tracer, /usr/local/bin/tracer), not a package path (cmd/tracer).
func isTracer(w string) bool {
	if w == "tracer" {
		return true
	}
	return strings.HasSuffix(w, "/tracer") &&
		(strings.HasPrefix(w, ".") || strings.HasPrefix(w, "/") || strings.HasPrefix(w, "bin/") || strings.HasPrefix(w, "$"))
}

func isMake(words []string) bool { return len(words) > 0 && words[0] == "make" }

// checkDocCommands checks each command and returns what does not work.
func checkDocCommands(cmds []docCommand, targets map[string]bool) []docProblem {
	var out []docProblem
	for _, c := range cmds {
		var err error
		if isMake(c.words) {
			err = checkMake(c.words[1:], targets)
		} else {
			err = checkTracer(c.words[1:], c.inline)
		}
		if err != nil {
			out = append(out, docProblem{line: c.line, cmd: c.text, err: err.Error()})
		}
	}
	return out
}

// checkMake: every target named on a make command line exists.
func checkMake(args []string, targets map[string]bool) error {
	var missing []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || assignRe.MatchString(a) || placeholderRe.MatchString(a) {
			continue // a flag, a variable, or `make X` naming a target in general
		}
		if !targets[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no Makefile target %s", strings.Join(missing, ", "))
	}
	return nil
}

// docsRoot is the command tree as Execute makes it: with the --help and
// --version flags cobra adds only then.
func docsRoot() *cobra.Command {
	root := newRootCommand()
	root.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	return root
}

// checkTracer parses a tracer command line (the words after the command
// word) with the real command tree, once per alternative of each `a|b`
// value. An inline span of command names alone (`tracer replay` in a
// sentence) names a command: it must exist, but need not be complete.
func checkTracer(args []string, inline bool) error {
	root := docsRoot()
	cmd, rest, err := root.Find(substitute(root, args, -1, 0))
	if err != nil {
		return err
	}
	if inline && len(rest) == 0 {
		return nil
	}
	// One run with the first alternative everywhere, then one per other
	// alternative of each value that has several.
	runs := [][2]int{{-1, 0}}
	for i := range args {
		if _, val, ok := flagValueAt(cmd, args, i); ok {
			for k := 1; k < len(strings.Split(val, "|")); k++ {
				runs = append(runs, [2]int{i, k})
			}
		}
	}
	for _, r := range runs {
		root := docsRoot()
		cmd, rest, err := root.Find(substitute(root, args, r[0], r[1]))
		if err != nil {
			return err
		}
		if err := parseAndValidate(cmd, rest); err != nil {
			return err
		}
	}
	return nil
}

// parseAndValidate parses the flags like Execute does, checks the
// positional arguments and the values the command validates itself.
func parseAndValidate(cmd *cobra.Command, args []string) error {
	if err := cmd.ParseFlags(args); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	var errs []error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if v := flagValidator(cmd.Name(), f.Name); v != nil {
			if err := v(f.Value.String()); err != nil {
				errs = append(errs, fmt.Errorf("%s --%s: %w", cmd.CommandPath(), f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// flagValidator returns the command's own check of a flag's value, for
// the flags whose values the command validates in RunE.
func flagValidator(cmd, flag string) func(string) error {
	oneOf := func(list []string) func(string) error {
		return func(v string) error {
			if !contains(list, v) {
				return fmt.Errorf("%q is not one of %s", v, strings.Join(list, ", "))
			}
			return nil
		}
	}
	switch flag {
	case "output":
		switch cmd {
		case "tcp", "trace", "replay":
			return func(v string) error { _, err := export.ParseFormat(v); return err }
		case "daemon":
			return func(v string) error {
				if v == "none" {
					return nil
				}
				_, err := export.ParseFormat(v)
				return err
			}
		}
	case "detail":
		return oneOf(detailModes)
	case "local":
		return oneOf(pipeline.LocalModes)
	case "otlp-protocol":
		return oneOf(export.Protocols)
	case "log-level":
		return func(v string) error { _, err := (&globalFlags{logLevel: v}).logger(); return err }
	case "log-format":
		return func(v string) error {
			empty := pflag.NewFlagSet("docs", pflag.ContinueOnError)
			_, err := (&daemonFlags{logFormat: v}).logger(&globalFlags{logLevel: "warn"}, empty, empty)
			return err
		}
	case "peer":
		return func(v string) error { _, err := parsePeer(v); return err }
	}
	return nil
}

// substitute returns args with placeholders replaced by values of their
// flag's type and each `a|b` value by its first alternative, except the
// one at index alt, which takes alternative k.
func substitute(root *cobra.Command, args []string, alt, k int) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		cmd = root
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		f, val, ok := flagValueAt(cmd, args, i)
		if !ok {
			if !strings.HasPrefix(a, "-") && placeholderRe.MatchString(a) {
				out[i] = "file" // a positional placeholder: FILE
			}
			continue
		}
		alts := strings.Split(val, "|")
		val = alts[0]
		if i == alt {
			val = alts[k]
		}
		if placeholderRe.MatchString(val) {
			val = placeholderValue(f)
		}
		if name, _, inline := strings.Cut(a, "="); inline && strings.HasPrefix(a, "-") {
			val = name + "=" + val
		}
		out[i] = val
	}
	return out
}

// flagValueAt says whether args[i] holds a flag's value, either as the
// separate value of the flag before it or after the = of --flag=value,
// and returns the flag and the value.
func flagValueAt(cmd *cobra.Command, args []string, i int) (*pflag.Flag, string, bool) {
	if strings.HasPrefix(args[i], "-") {
		if _, val, ok := strings.Cut(args[i], "="); ok {
			return lookupFlag(cmd, args[i]), val, true
		}
		return nil, "", false
	}
	if i == 0 || strings.Contains(args[i-1], "=") {
		return nil, "", false
	}
	f := lookupFlag(cmd, args[i-1])
	if f == nil || f.NoOptDefVal != "" {
		return nil, "", false
	}
	return f, args[i], true
}

// lookupFlag finds the flag a word names (--name, -n), local or inherited.
func lookupFlag(cmd *cobra.Command, word string) *pflag.Flag {
	if !strings.HasPrefix(word, "-") || word == "-" || word == "--" {
		return nil
	}
	name, _, _ := strings.Cut(strings.TrimLeft(word, "-"), "=")
	long := strings.HasPrefix(word, "--")
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.InheritedFlags()} {
		if long {
			if f := fs.Lookup(name); f != nil {
				return f
			}
		} else if len(name) == 1 {
			if f := fs.ShorthandLookup(name); f != nil {
				return f
			}
		}
	}
	return nil
}

// placeholderValue is a value of the flag's type for a placeholder, or
// an example for the free-form values a command validates.
func placeholderValue(f *pflag.Flag) string {
	if f == nil {
		return "x"
	}
	if f.Name == "peer" {
		return "10.0.0.0/8"
	}
	switch f.Value.Type() {
	case "int", "int32", "int64", "uint", "uint32", "uint64", "float64":
		return "4242"
	case "duration":
		return "10s"
	}
	return "x"
}

// makeTargets reads the explicit targets of a Makefile.
func makeTargets(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*:([^=]|$)`)
	targets := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		for _, name := range strings.Fields(m[1]) {
			if !strings.HasPrefix(name, ".") {
				targets[name] = true
			}
		}
	}
	if len(targets) == 0 {
		t.Fatalf("no targets found in %s", path)
	}
	var names []string
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("Makefile targets: %s", strings.Join(names, " "))
	return targets
}
