package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/timeout-tracer/tracer/deploy"
)

// config is imagebuild's command line.
type config struct {
	out, repo, ref, platforms, source, caDir, goCmd string
}

// result is what was written.
type result struct {
	ref, digest, revision string
	platforms             []string
}

func (c config) imageRef() (string, error) {
	if c.ref != "" {
		return c.ref, nil
	}
	return deploy.Image()
}

// build compiles the tracer for each platform and writes the image tar.
// Every input is fixed by the commit: the binaries (-trimpath, no VCS
// stamping but the commit given explicitly), the times (the commit's,
// or SOURCE_DATE_EPOCH), the CA bundle (a Debian package's files).
func build(c config, log io.Writer) (result, error) {
	var res result
	if c.repo == "" {
		top, err := git("", "rev-parse", "--show-toplevel")
		if err != nil {
			return res, err
		}
		c.repo = top
	}
	ref, err := c.imageRef()
	if err != nil {
		return res, err
	}
	tag, err := tagOf(ref)
	if err != nil {
		return res, err
	}
	m := meta{ref: ref, version: tag, source: c.source}
	if m.revision, err = git(c.repo, "rev-parse", "HEAD"); err != nil {
		return res, err
	}
	if st, err := git(c.repo, "status", "--porcelain", "--untracked-files=no"); err != nil {
		return res, err
	} else if st != "" {
		// Not reproducible, and it must not pass for the release.
		m.version += "-dirty"
	}
	if m.created, err = sourceDate(c.repo); err != nil {
		return res, err
	}
	var ca, caCopyright []byte
	if c.caDir != "" {
		if ca, err = caBundle(c.caDir); err != nil {
			return res, err
		}
		m.caSource = "debian ca-certificates " + debVersion("ca-certificates")
		caCopyright, _ = os.ReadFile("/usr/share/doc/ca-certificates/copyright")
	}

	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	var plats []platformImage
	for _, p := range strings.Split(c.platforms, ",") {
		plat, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return res, err
		}
		if plat.OS != "linux" {
			return res, fmt.Errorf("platform %s: the tracer runs on linux only", p)
		}
		bin := filepath.Join(tmp, "tracer-"+plat.Architecture)
		fmt.Fprintf(log, "building %s for %s\n", bin, plat)
		if err := compile(c, plat, m, bin); err != nil {
			return res, err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return res, err
		}
		plats = append(plats, platformImage{platform: *plat, binary: b})
		res.platforms = append(res.platforms, plat.String())
	}
	idx, err := buildIndex(m, plats, ca, caCopyright)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return res, err
	}
	f, err := os.CreateTemp(filepath.Dir(c.out), ".tracer-image-*")
	if err != nil {
		return res, err
	}
	defer os.Remove(f.Name())
	if err := errors.Join(writeArchive(f, idx, ref, tag, m.created), f.Close()); err != nil {
		return res, fmt.Errorf("write %s: %w", c.out, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return res, err
	}
	if err := os.Rename(f.Name(), c.out); err != nil {
		return res, err
	}
	d, err := idx.Digest()
	if err != nil {
		return res, err
	}
	res.ref, res.digest, res.revision = ref, d.String(), m.revision
	return res, nil
}

// compile builds a static tracer: no cgo (no libc in the image), paths
// trimmed, VCS stamping off (it would record the work tree's state), the
// version and commit given by link flags, so that the same commit and Go
// toolchain give the same binary wherever the checkout lies.
func compile(c config, plat *v1.Platform, m meta, out string) error {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", m.version, m.revision)
	cmd := exec.Command(c.goCmd, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/tracer")
	cmd.Dir = c.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+plat.OS, "GOARCH="+plat.Architecture, "GOFLAGS=")
	if plat.Architecture == "arm" && plat.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(plat.Variant, "v"))
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", plat, err, stderr.String())
	}
	return nil
}

// tagOf returns the tag of a reference, which must have one: an image
// imported without a tag could not be the one a manifest names.
func tagOf(ref string) (string, error) {
	name := ref[strings.LastIndex(ref, "/")+1:]
	i := strings.LastIndex(name, ":")
	if i < 0 || strings.Contains(ref, "@") {
		return "", fmt.Errorf("image %q: want name:tag", ref)
	}
	return name[i+1:], nil
}

// sourceDate is SOURCE_DATE_EPOCH (reproducible-builds.org) if set, else
// the commit's time.
func sourceDate(repo string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git(repo, "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return time.Time{}, err
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("source date %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// debVersion is an installed Debian package's version, "unknown" off
// Debian.
func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		return "unknown"
	}
	return string(out)
}
