package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// kernel is one Debian kernel package to boot.
type kernel struct {
	Series  string // "6.1", "6.12"
	Arch    string // Debian and Go architecture: amd64, arm64
	Pkg     string // linux-image-6.1.0-57-amd64
	Release string // uname -r: 6.1.0-57-amd64
	Version string // the package version, e.g. 6.1.192-3: the upstream release is in it
	Deb     string // the downloaded package
	Vmlinuz string // the extracted kernel image
	Config  string // the extracted kernel config (packed into the guest's /boot)
}

// Upstream is the kernel's upstream version, e.g. 6.1.192.
func (k kernel) Upstream() string {
	v, _, _ := strings.Cut(k.Version, "-")
	return v
}

// imageRE matches the plain (not -rt, -cloud, -dbg, -16k...) kernel images of
// both naming schemes: linux-image-6.1.0-57-amd64 and
// linux-image-6.12.117+deb12-amd64.
var imageRE = regexp.MustCompile(`^linux-image-((\d+)\.(\d+))\.(\d+)(?:-(\d+))?(?:\+deb\d+)?-(amd64|arm64)$`)

// pickKernels chooses the newest plain image of each series for each arch
// among the package names apt knows.
func pickKernels(names []string, series, arches []string) ([]kernel, error) {
	type cand struct {
		k   kernel
		key [2]int // patch level, ABI number
	}
	best := map[string]cand{}
	for _, n := range names {
		m := imageRE.FindStringSubmatch(n)
		if m == nil || !slices.Contains(series, m[1]) || !slices.Contains(arches, m[6]) {
			continue
		}
		patch, _ := strconv.Atoi(m[4])
		abi, _ := strconv.Atoi(m[5])
		c := cand{kernel{Series: m[1], Arch: m[6], Pkg: n, Release: strings.TrimPrefix(n, "linux-image-")}, [2]int{patch, abi}}
		id := m[1] + "/" + m[6]
		if b, ok := best[id]; !ok || c.key[0] > b.key[0] || (c.key[0] == b.key[0] && c.key[1] > b.key[1]) {
			best[id] = c
		}
	}
	var out []kernel
	var missing []string
	for _, s := range series {
		for _, a := range arches {
			c, ok := best[s+"/"+a]
			if !ok {
				missing = append(missing, s+" "+a)
				continue
			}
			out = append(out, c.k)
		}
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("apt knows no kernel package for %s (run .ci/deps: it adds arm64 and runs apt-get update)", strings.Join(missing, ", "))
	}
	return out, nil
}

// aptKernels lists the kernel images apt knows and picks the ones to boot.
func aptKernels(series, arches []string) ([]kernel, error) {
	out, err := command("apt-cache", "pkgnames", "linux-image-")
	if err != nil {
		return nil, err
	}
	return pickKernels(strings.Fields(string(out)), series, arches)
}

// explicitKernels turns package names given on the command line into kernels.
func explicitKernels(pkgs []string) ([]kernel, error) {
	var out []kernel
	for _, p := range pkgs {
		m := imageRE.FindStringSubmatch(p)
		if m == nil {
			return nil, fmt.Errorf("%q is not a plain Debian kernel image package (linux-image-X.Y...-amd64|arm64)", p)
		}
		out = append(out, kernel{Series: m[1], Arch: m[6], Pkg: p, Release: strings.TrimPrefix(p, "linux-image-")})
	}
	return out, nil
}

// fetchKernel downloads the package into cache/debs unless a copy is there,
// and extracts its vmlinuz and config into cache/kernels/RELEASE.
func fetchKernel(cache string, k *kernel) error {
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	deb, err := cachedDeb(debs, k)
	if err != nil {
		return err
	}
	if deb == "" {
		// As root apt drops to its sandbox user, who cannot write here.
		if _, err := commandIn(debs, "apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", k.Pkg+":"+k.Arch); err != nil {
			return fmt.Errorf("download %s: %w", k.Pkg, err)
		}
		if deb, err = cachedDeb(debs, k); err != nil || deb == "" {
			return fmt.Errorf("download %s: no .deb after apt-get download (%v)", k.Pkg, err)
		}
	}
	k.Deb = deb
	// linux-image-6.1.0-57-amd64_6.1.192-3_amd64.deb
	k.Version = strings.Split(filepath.Base(deb), "_")[1]

	dir := filepath.Join(cache, "kernels", k.Release)
	k.Vmlinuz, k.Config = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "config")
	if fileExists(k.Vmlinuz) && fileExists(k.Config) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return extractBoot(deb, map[string]string{
		"./boot/vmlinuz-" + k.Release: k.Vmlinuz,
		"./boot/config-" + k.Release:  k.Config,
	})
}

func cachedDeb(dir string, k *kernel) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, k.Pkg+"_*_"+k.Arch+".deb"))
	if err != nil || len(m) == 0 {
		return "", err
	}
	slices.Sort(m)
	return m[len(m)-1], nil
}

// extractBoot copies the named members of a .deb's data tarball to files:
// only what booting needs, not the hundreds of MB of modules.
func extractBoot(deb string, want map[string]string) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("unpack %s: %w", deb, err)
	}
	defer func() {
		io.Copy(io.Discard, pipe)
		cmd.Wait()
	}()
	tr := tar.NewReader(pipe)
	left := len(want)
	for left > 0 {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w: %s", deb, err, stderr.String())
		}
		dst, ok := want[h.Name]
		if !ok {
			continue
		}
		if err := writeFileFrom(dst, tr); err != nil {
			return err
		}
		left--
	}
	if left > 0 {
		return fmt.Errorf("unpack %s: %d of %d boot files missing", deb, left, len(want))
	}
	return nil
}

// writeFileFrom writes atomically, so an interrupted run leaves no torn cache.
func writeFileFrom(dst string, r io.Reader) error {
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// pruneCache removes downloaded packages and extracted kernels that this
// run does not use (superseded ABIs): each package is 60-110 MB.
func pruneCache(cache string, keep []kernel) {
	debs, _ := filepath.Glob(filepath.Join(cache, "debs", "*.deb"))
	for _, f := range debs {
		if !slices.ContainsFunc(keep, func(k kernel) bool { return k.Deb == f }) {
			os.Remove(f)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "kernels", "*"))
	for _, d := range dirs {
		if !slices.ContainsFunc(keep, func(k kernel) bool { return filepath.Dir(k.Vmlinuz) == d }) {
			os.RemoveAll(d)
		}
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Size() > 0
}

func command(name string, args ...string) ([]byte, error) { return commandIn("", name, args...) }

// commandIn runs a command and returns its stdout; its error carries the
// command line and stderr.
func commandIn(dir, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
