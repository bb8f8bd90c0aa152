package gobin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenIdentifiesTargets proves that version, architecture, PIE and the
// module list come out right for every build variant.
func TestOpenIdentifiesTargets(t *testing.T) {
	want := goVersion(t)
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		if b.GoVersion != want {
			t.Errorf("GoVersion = %q, want %q", b.GoVersion, want)
		}
		if b.Arch != v.goarch {
			t.Errorf("Arch = %q, want %q", b.Arch, v.goarch)
		}
		wantPIE := bytes.Contains([]byte(v.mode), []byte("pie"))
		if b.PIE != wantPIE {
			t.Errorf("PIE = %v, want %v", b.PIE, wantPIE)
		}
		if b.Main.Path != "example.com/target" {
			t.Errorf("Main.Path = %q", b.Main.Path)
		}
		found := false
		for _, m := range b.Modules {
			if m.Path == "example.com/dep" {
				found = true
				if m.Version != "v0.0.0" || m.Replace != "./dep" {
					t.Errorf("dep module = %+v, want v0.0.0 replaced by ./dep", m)
				}
			}
		}
		if !found {
			t.Errorf("Modules %+v lack example.com/dep", b.Modules)
		}
		st, err := os.Stat(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		if b.File != fileID(st) || b.File.Ino == 0 {
			t.Errorf("File = %+v, want %+v", b.File, fileID(st))
		}
	})
}

// TestOpenRefuses proves each refusal carries its typed error and a reason.
func TestOpenRefuses(t *testing.T) {
	plain := build(t, variants[0])
	arm := build(t, variants[10])
	dir := t.TempDir()
	version := []byte(goVersion(t))

	patched := func(t *testing.T, src string, edit func([]byte) []byte) string {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, t.Name()[len("TestOpenRefuses/"):])
		if err := os.WriteFile(p, edit(data), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// withVersion rewrites the Go version in the build information,
	// keeping its length, to fake an old toolchain.
	withVersion := func(old string) func([]byte) []byte {
		return func(data []byte) []byte {
			fake := append([]byte(old), bytes.Repeat([]byte("9"), len(version)-len(old))...)
			if !bytes.Contains(data, version) {
				t.Fatalf("binary does not contain %q", version)
			}
			return bytes.Replace(data, version, fake, -1)
		}
	}

	cases := []struct {
		name string
		path func(t *testing.T) string
		want error
	}{
		{"bin-true", func(t *testing.T) string { return "/bin/true" }, ErrNotGo},
		{"script", func(t *testing.T) string {
			p := filepath.Join(dir, "script")
			os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755)
			return p
		}, ErrNotGo},
		{"amd64-go1.16", func(t *testing.T) string { return patched(t, plain, withVersion("go1.16.")) }, ErrGoTooOld},
		{"arm64-go1.17", func(t *testing.T) string { return patched(t, arm, withVersion("go1.17.")) }, ErrGoTooOld},
		{"riscv64", func(t *testing.T) string {
			return patched(t, plain, func(d []byte) []byte {
				binary.LittleEndian.PutUint16(d[18:], uint16(elf.EM_RISCV))
				return d
			})
		}, ErrUnsupportedArch},
		{"truncated", func(t *testing.T) string {
			return patched(t, plain, func(d []byte) []byte { return d[:len(d)/2] })
		}, ErrCorrupt},
		{"missing", func(t *testing.T) string { return filepath.Join(dir, "does-not-exist") }, fs.ErrNotExist},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Open(c.path(t))
			if err == nil {
				b.Close()
				t.Fatalf("Open succeeded, want %v", c.want)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Open error %q is not %v", err, c.want)
			}
			var oe *OpenError
			if !errors.As(err, &oe) {
				t.Fatalf("Open error %T is not an *OpenError", err)
			}
			t.Logf("%v", err)
		})
	}
}
