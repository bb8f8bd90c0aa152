package main

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/timeout-tracer/tracer/lab/fuzzcorpus"
	"github.com/timeout-tracer/tracer/lab/netlab"
)

var writeCorpus = flag.Bool("corpus.write", false, "write record.FuzzReader's corpus from real `tracer record` runs (root, fault lab)")

// TestCaptureRecordCorpus writes the record reader's fuzz corpus from
// files `tracer record` wrote during lab runs (a slow server, a
// blackholed one): the header and, per entry, a slice of consecutive
// lines, so each file stays a few KiB. Run with -corpus.write (root).
func TestCaptureRecordCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("writes the fuzz corpus only with -corpus.write")
	}
	requireGoTracing(t)
	for _, sc := range []struct {
		name  string
		setup []func(*netlab.Pair) error
	}{
		{"slow", nil},
		{"syn-blackhole", []func(*netlab.Pair) error{func(p *netlab.Pair) error { return p.Blackhole(8080) }}},
	} {
		file := filepath.Join(t.TempDir(), sc.name+".events")
		server := []string{"http-server", "-addr", ":8080", "-delay", "400ms"}
		client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "3", "-concurrency", "1", "-timeout", "300ms", "-span", "before"}
		runLabCmd(t, server, client, false, nil, []string{"record", "--pid", "PID", "-o", file, "--detail", "always"})
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		s := bufio.NewScanner(bytes.NewReader(data))
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			lines = append(lines, s.Text())
		}
		if len(lines) < 2 {
			t.Fatalf("%s: recording has %d lines", sc.name, len(lines))
		}
		hdr, body := lines[0], lines[1:]
		const per = 12
		for i, n := 0, 0; i < len(body) && n < 4; i, n = i+len(body)/4+1, n+1 {
			chunk := body[i:min(i+per, len(body))]
			entry := hdr + "\n" + strings.Join(chunk, "\n") + "\n"
			if err := fuzzcorpus.Write("../../record/testdata/fuzz", "FuzzReader", sc.name, []byte(entry)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
