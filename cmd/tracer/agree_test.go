package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/netlab"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// TestDaemonAndTraceAgree: `tracer daemon` and `tracer trace --pid` on one
// workload at once — an HTTP client with four workers whose server is
// blackholed after warm-up — report the same expiries with the same
// classes. Measured before: the daemon classed 28 of 32 timeouts rto where
// the trace said rto 32 times, the rest slow_peer "no retransmits" on
// sockets it never recorded (a stale socket table entry had taken their
// events). Both run with the detail tier off, so that what they decide
// from is the same: the kernel's events, and the expiries.
func TestDaemonAndTraceAgree(t *testing.T) {
	requireGoTracing(t)
	p := netlab.NewPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab := testprog.Path(t, "labapp")
	// The client under a name of its own: the daemon traces it alone.
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	name := fmt.Sprintf("ttagree%d", os.Getpid())
	client := filepath.Join(dir, name)
	data, err := os.ReadFile(lab)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(client, data, 0o755)

	go io.Copy(io.Discard, startReady(t, p.ServerCmd(ctx, lab, "http-server", "-addr", ":8080")))

	d := startDaemon(t, nil, "--include-exe", name, "--detail", "never")
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })

	target := strings.ReplaceAll(labTarget, "SERVER", p.ServerAddr.String())
	cl := p.ClientCmd(ctx, client, "client", "-proto", "http", "-target", target, "-n", "1000000", "-concurrency", "4",
		"-timeout", "1500ms", "-span", "before", "-wait")
	stdin, _ := cl.StdinPipe()
	clOut, _ := cl.StdoutPipe()
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cl.Process.Kill(); cl.Wait() }()
	cbr := bufio.NewReader(clOut)
	if line, err := cbr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("client not ready: %q %v", line, err)
	}
	pid := cl.Process.Pid
	d.waitFor("the client traced", func() bool { return d.logged("tracing process", pid) })

	tr := exec.CommandContext(ctx, testprog.Tracer(t), "trace", "--pid", fmt.Sprint(pid), "-o", "json", "--detail", "never")
	var trOut, trErr syncBuffer
	tr.Stdout, tr.Stderr = &trOut, &trErr
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	defer tr.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(trErr.String(), "tracing pid"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tracer trace did not attach: %s", trErr.String())
		}
	}

	// Warm-up: requests answered; then the server drops everything.
	io.WriteString(stdin, "go\n")
	lines := make(chan labLine, 1024)
	go func() {
		sc := bufio.NewScanner(cbr)
		for sc.Scan() {
			var l labLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && !l.Summary {
				lines <- l
			}
		}
		close(lines)
	}()
	ok, expired := 0, 0
	for ok < 20 {
		select {
		case l := <-lines:
			if l.Outcome == "ok" {
				ok++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("warm-up: %d requests answered", ok)
		}
	}
	if err := p.Blackhole(8080); err != nil {
		t.Fatal(err)
	}
	for expired < 20 {
		select {
		case l := <-lines:
			if l.Outcome == "deadline_exceeded" {
				expired++
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("after the blackhole: %d timeouts", expired)
		}
	}
	// The expiries just before the client is killed are left out of the
	// comparison: the exit aborts its connects, which the daemon (it
	// detaches an exiting process) and the trace see differently.
	killed := time.Now()
	cl.Process.Kill()
	cl.Wait()
	time.Sleep(time.Second) // the last grace windows
	tr.Process.Signal(os.Interrupt)
	tr.Wait()
	d.cmd.Process.Signal(os.Interrupt)
	<-d.done

	key := func(r export.TimeoutJSON) string { return r.Context + "@" + r.Deadline }
	fromTrace := map[string]export.TimeoutJSON{}
	for _, line := range strings.Split(trOut.String(), "\n") {
		var r export.TimeoutJSON
		if json.Unmarshal([]byte(line), &r) == nil && r.Kind == "timeout" && r.Cause != nil {
			fromTrace[key(r)] = r
		}
	}
	d.mu.Lock()
	fromDaemon := append([]export.TimeoutJSON(nil), d.reports...)
	d.mu.Unlock()
	classes := func(rs map[string]export.TimeoutJSON) map[string]int {
		m := map[string]int{}
		for _, r := range rs {
			m[string(r.Cause.Class)]++
		}
		return m
	}
	matched, differ := 0, 0
	daemonByKey := map[string]export.TimeoutJSON{}
	for _, r := range fromDaemon {
		if r.PID != uint32(pid) || r.Cause == nil {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, r.Deadline); err == nil && at.After(killed.Add(-time.Second)) {
			delete(fromTrace, key(r))
			continue
		}
		daemonByKey[key(r)] = r
		tr, ok := fromTrace[key(r)]
		if !ok {
			continue
		}
		matched++
		if tr.Cause.Class != r.Cause.Class {
			differ++
			t.Errorf("expiry %s: daemon %s (%s), trace %s (%s)\ndaemon's connections: %s\ntrace's: %s", key(r), r.Cause.Class, r.Cause.Summary, tr.Cause.Class, tr.Cause.Summary,
				connList(r), connList(tr))
		}
	}
	t.Logf("%d timeouts logged by the client; daemon %d reports %v, trace %d reports %v; %d matched, %d differ",
		expired, len(daemonByKey), classes(daemonByKey), len(fromTrace), classes(fromTrace), matched, differ)
	for k, r := range fromTrace {
		if at, err := time.Parse(time.RFC3339Nano, r.Deadline); err == nil && at.After(killed.Add(-time.Second)) {
			delete(fromTrace, k)
		}
	}
	if matched < expired-8 || matched < len(fromTrace) || matched < len(daemonByKey) {
		t.Errorf("%d expiries reported by both, of %d logged (daemon %d, trace %d, the last second's left out): each tool must see every one",
			matched, expired, len(daemonByKey), len(fromTrace))
	}
	network := 0
	for _, r := range daemonByKey {
		switch r.Cause.Class {
		case "rto", "syn_timeout":
			network++
		default:
			t.Logf("daemon: %s at %s: %s (%s)", r.Cause.Class, r.Deadline, r.Cause.Summary, r.Cause.Note)
		}
	}
	if network*2 < len(daemonByKey) {
		t.Errorf("%d of %d daemon reports rto or syn_timeout for a blackholed server", network, len(daemonByKey))
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// connList is a report's connections in brief, for a failure's message.
func connList(r export.TimeoutJSON) string {
	var out []string
	for _, c := range r.Cause.Connections {
		out = append(out, fmt.Sprintf("%d %s→%s %s %s %v", c.Cookie, c.Local, c.Peer, c.Class, c.State, c.Counts))
	}
	return strings.Join(out, "; ")
}
