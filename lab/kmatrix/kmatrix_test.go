package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestParseConsole: KMATRIX lines are found among kernel messages, also
// when a message precedes the marker on the same line, and quoted details
// keep their spaces, quotes and equals signs.
func TestParseConsole(t *testing.T) {
	console := strings.Join([]string{
		"[    0.000000] Linux version 6.1.0-57-amd64",
		"",
		`KMATRIX info release="6.1.0-57-amd64" arch=amd64`,
		`KMATRIX check=preflight result=pass secs=0.4 detail="root, BTF"`,
		`KMATRIX hook=sock_send_length mode=auto type=absent detail="tp_btf: raw_tp \"sock_send_length\" not supported"`,
		`[   12.1] random: crng init doneKMATRIX check=go_cold result=fail secs=5.5 detail="a=b; x y"` + "\r",
		"KMATRIX garbage without fields=\"unterminated",
		"KMATRIX-DONE exit=1",
		"[   40.0] reboot: Power down",
	}, "\n")
	var r run
	for _, l := range strings.Split(console, "\n") {
		r.parseLine(l)
	}
	r.finish(nil)
	if r.Release != "6.1.0-57-amd64" || r.Arch != "amd64" {
		t.Errorf("info: %q %q", r.Release, r.Arch)
	}
	want := []checkResult{
		{Name: "preflight", Result: "pass", Detail: "root, BTF", Secs: "0.4"},
		{Name: "go_cold", Result: "fail", Detail: "a=b; x y", Secs: "5.5"},
	}
	if len(r.Checks) != len(want) {
		t.Fatalf("checks %+v, want %+v", r.Checks, want)
	}
	for i := range want {
		if r.Checks[i] != want[i] {
			t.Errorf("check %d: %+v, want %+v", i, r.Checks[i], want[i])
		}
	}
	if len(r.Hooks) != 1 || r.Hooks[0].Detail != `tp_btf: raw_tp "sock_send_length" not supported` || r.Hooks[0].Type != "absent" {
		t.Errorf("hooks %+v", r.Hooks)
	}
	if !r.Done || r.Exit != 1 || r.Err != nil || !r.failed() {
		t.Errorf("done=%v exit=%d err=%v failed=%v", r.Done, r.Exit, r.Err, r.failed())
	}
}

// TestRunWithoutMarkerFails: a guest that printed passes but never the
// DONE marker (crashed, hung, timed out) is a failure; passes and known
// limitations with the marker are not.
func TestRunWithoutMarkerFails(t *testing.T) {
	var r run
	r.parseLine(`KMATRIX check=preflight result=pass secs=0.1 detail=""`)
	r.finish(nil)
	if r.Err == nil || !r.failed() {
		t.Fatalf("no marker: err=%v failed=%v", r.Err, r.failed())
	}
	var ok run
	ok.parseLine(`KMATRIX check=preflight result=pass secs=0.1 detail=""`)
	ok.parseLine(`KMATRIX check=rto_preexisting result=known secs=0.1 detail="no sock_send_length"`)
	ok.parseLine(`KMATRIX-DONE exit=0`)
	ok.finish(nil)
	if ok.failed() {
		t.Fatalf("all passed and marker seen, still failed: %+v", ok)
	}
}

// TestPickKernels: the newest plain image per series and arch, never an
// -rt, -cloud, -16k, -dbg or -unsigned flavour; a missing combination is
// an error that says what to do.
func TestPickKernels(t *testing.T) {
	names := []string{
		"linux-image-6.1.0-9-amd64", "linux-image-6.1.0-57-amd64", "linux-image-6.1.0-56-amd64",
		"linux-image-6.1.0-57-rt-amd64", "linux-image-6.1.0-57-cloud-amd64", "linux-image-6.1.0-57-amd64-dbg",
		"linux-image-6.1.0-57-arm64", "linux-image-6.1.0-57-arm64-unsigned",
		"linux-image-6.12.113+deb12-amd64", "linux-image-6.12.117+deb12-amd64", "linux-image-6.12.117+deb12-arm64-16k",
		"linux-image-amd64", "linux-image-6.12.117+deb12-arm64",
	}
	got, err := pickKernels(names, []string{"6.1", "6.12"}, []string{"amd64", "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, k := range got {
		pkgs = append(pkgs, k.Pkg+"|"+k.Release+"|"+k.Series+"|"+k.Arch)
	}
	want := "linux-image-6.1.0-57-amd64|6.1.0-57-amd64|6.1|amd64 linux-image-6.1.0-57-arm64|6.1.0-57-arm64|6.1|arm64 " +
		"linux-image-6.12.117+deb12-amd64|6.12.117+deb12-amd64|6.12|amd64 linux-image-6.12.117+deb12-arm64|6.12.117+deb12-arm64|6.12|arm64"
	if s := strings.Join(pkgs, " "); s != want {
		t.Errorf("picked\n%s\nwant\n%s", s, want)
	}
	if _, err := pickKernels(names[:3], []string{"6.1"}, []string{"amd64", "arm64"}); err == nil || !strings.Contains(err.Error(), "6.1 arm64") {
		t.Errorf("missing arm64 not reported: %v", err)
	}
}

// TestCpioNewc checks the archive byte for byte against the newc layout
// the kernel unpacks: "070701", 13 eight-digit hex fields, the name with
// its NUL padded to 4 bytes, the body padded to 4, a TRAILER!!! entry.
func TestCpioNewc(t *testing.T) {
	var buf bytes.Buffer
	cw := &cpioWriter{w: &buf}
	cw.Dir("bin")
	cw.CharDev("dev/console", 5, 1)
	cw.File("bin/x", 0o755, []byte("hello"))
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	hdr := func(ino, mode, nlink, size, rmaj, rmin, namesize string) string {
		return "070701" + ino + mode + "00000000" + "00000000" + nlink + "00000000" + size +
			"00000000" + "00000000" + rmaj + rmin + namesize + "00000000"
	}
	want := hdr("00000001", "000041ED", "00000002", "00000000", "00000000", "00000000", "00000004") + "bin\x00" + "\x00\x00" +
		hdr("00000002", "00002180", "00000001", "00000000", "00000005", "00000001", "0000000C") + "dev/console\x00" + "\x00\x00" +
		hdr("00000003", "000081ED", "00000001", "00000005", "00000000", "00000000", "00000006") + "bin/x\x00" + "hello\x00\x00\x00" +
		hdr("00000004", "00000000", "00000001", "00000000", "00000000", "00000000", "0000000B") + "TRAILER!!!\x00" + "\x00\x00\x00"
	if got := buf.String(); got != want {
		t.Errorf("archive\n%q\nwant\n%q", got, want)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-aligned", buf.Len())
	}
}

// TestCompareVersions: numeric, not lexical (6.1 < 6.12 < 6.18).
func TestCompareVersions(t *testing.T) {
	for _, c := range []struct{ a, b string }{{"6.1.192", "6.12.117"}, {"6.12.117", "6.18.44"}, {"6.1.9", "6.1.10"}} {
		if compareVersions(c.a, c.b) >= 0 || compareVersions(c.b, c.a) <= 0 {
			t.Errorf("%s should sort before %s", c.a, c.b)
		}
	}
}
