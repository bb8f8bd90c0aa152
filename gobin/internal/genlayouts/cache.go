package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The cache holds each probe's measured offsets under a key that hashes
// everything the result depends on:
//
//   - the probe: family, go.mod, main.go, version, arch, GOTOOLCHAIN and
//     required modules (module versions and toolchains on the proxy never
//     change, so neither does what a build selects and compiles);
//   - the code that measures: the Go files of every package of this module
//     the generator links (gobin's DWARF reader, the field lists), the
//     versions of the other modules it links, and the Go that built it.
//
// A hit is therefore the result a build would give now, and a check that
// compares the committed files with a run from the cache is as strict as one
// that builds every probe. The cache lives outside the checkout (default
// $XDG_CACHE_HOME/timeout-tracer/layouts, or $TT_LAYOUTS_CACHE), so a fresh
// clone cannot bring its own.

// cacheVersion changes when the entries' meaning changes.
const cacheVersion = "genlayouts-cache-1"

type cache struct {
	dir  string
	code string // hash of the generator's code
}

func defaultCacheDir() string {
	if d := os.Getenv("TT_LAYOUTS_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "off"
	}
	return filepath.Join(d, "timeout-tracer", "layouts")
}

func openCache(dir string) (*cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	code, err := codeHash()
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &cache{dir: dir, code: code}, nil
}

// codeHash hashes the source of the generator and of the packages of this
// module it links, and names the other modules it links.
func codeHash() (string, error) {
	const self = "github.com/timeout-tracer/tracer/gobin/internal/genlayouts"
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if not .Standard}}{{.ImportPath}}|{{with .Module}}{{.Path}}|{{.Version}}|{{.Main}}{{end}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}`, self)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", cacheVersion, runtime.Version())
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 6 {
			return "", fmt.Errorf("go list: unexpected line %q", line)
		}
		importPath, modPath, modVersion, main, dir, files := f[0], f[1], f[2], f[3], f[4], f[5]
		if main != "true" {
			fmt.Fprintf(h, "dep %s %s@%s\n", importPath, modPath, modVersion)
			continue
		}
		for _, name := range strings.Split(files, ",") {
			src, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return "", err
			}
			sum := sha256.Sum256(src)
			fmt.Fprintf(h, "file %s/%s %x\n", importPath, name, sum)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cacheKey names the probe's entry.
func (g *generator) cacheKey(p probe) (string, error) {
	if g.cache == nil {
		return "", nil
	}
	spec, err := json.Marshal(struct {
		Code, Family, GoMod, Main, Version, Arch, Toolchain string
		Require                                             []string
	}{g.cache.code, p.fam.name, p.fam.goMod, p.fam.main, p.version, p.arch, p.toolchain, p.require})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(spec)
	return hex.EncodeToString(sum[:]), nil
}

func (c *cache) path(key string) string { return filepath.Join(c.dir, key+".json") }

// writeSeed writes the result of every probe measured into the seed
// directory and removes the entries no probe used: the committed results are
// then exactly this run's.
func (g *generator) writeSeed() (written, removed int, err error) {
	if g.seed == nil {
		return 0, 0, fmt.Errorf("write the committed results: no cache, so no keys (-cache off or -seed off)")
	}
	if err := os.MkdirAll(g.seed.dir, 0o755); err != nil {
		return 0, 0, fmt.Errorf("write the committed results: %w", err)
	}
	for key, recs := range g.used {
		if err := g.seed.put(key, recs); err != nil {
			return written, removed, fmt.Errorf("write the committed results: %w", err)
		}
		written++
	}
	ents, err := os.ReadDir(g.seed.dir)
	if err != nil {
		return written, removed, err
	}
	for _, e := range ents {
		key, ok := strings.CutSuffix(e.Name(), ".json")
		if _, used := g.used[key]; ok && !used {
			if err := os.Remove(filepath.Join(g.seed.dir, e.Name())); err != nil {
				return written, removed, err
			}
			removed++
		}
	}
	return written, removed, nil
}

func (c *cache) get(key string) ([]record, bool) {
	if c == nil {
		return nil, false
	}
	data, err := os.ReadFile(c.path(key))
	if err != nil {
		return nil, false
	}
	var recs []record
	if err := json.Unmarshal(data, &recs); err != nil || len(recs) == 0 {
		return nil, false
	}
	return recs, true
}

// put stores an entry atomically: a concurrent reader sees it whole or not.
func (c *cache) put(key string, recs []record) error {
	if c == nil {
		return nil
	}
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, key+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.path(key))
}
