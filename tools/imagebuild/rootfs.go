package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The image's file system, the same for every platform but the binary.
// Everything is owned by root and writable only by root: nothing in the
// image needs to be written at run time (the DaemonSet's root file system is
// read-only), and a file owned by another user could be replaced by that
// user inside a running container. /tmp is the one world-writable
// directory, for `docker run` users without a read-only root.
const (
	binaryPath = "usr/local/bin/tracer"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
	envPath    = "PATH=/usr/local/bin:/usr/bin:/bin"
)

// Users the image knows by name: root, which the DaemonSet runs as (BPF
// needs it, see deploy/README.md), and nobody for unprivileged use
// (`tracer replay`). Go's os/user and tools like `id` read these.
const (
	passwd    = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	group     = "root:x:0:\nnogroup:x:65534:\n"
	nsswitch  = "hosts: files dns\n" // Go's resolver order without glibc
	dirMode   = 0o755
	fileMode  = 0o644
	execMode  = 0o755
	stickyTmp = 0o1777
)

// entry is one file or directory of the layer.
type entry struct {
	name string // relative, no leading slash
	mode int64
	dir  bool
	data []byte
}

// rootfs lists the layer's entries for one platform's binary. The CA
// bundle may be nil (no certificates: OTLP over TLS then needs a bundle
// mounted at /etc/ssl/certs/ca-certificates.crt).
func rootfs(binary, caBundle, caCopyright []byte) []entry {
	files := []entry{
		{name: "etc/passwd", mode: fileMode, data: []byte(passwd)},
		{name: "etc/group", mode: fileMode, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: fileMode, data: []byte(nsswitch)},
		{name: binaryPath, mode: execMode, data: binary},
		{name: "tmp", mode: stickyTmp, dir: true},
	}
	if caBundle != nil {
		files = append(files, entry{name: caPath, mode: fileMode, data: caBundle})
		if caCopyright != nil {
			files = append(files, entry{name: "usr/share/doc/ca-certificates/copyright", mode: fileMode, data: caCopyright})
		}
	}
	// Every parent directory explicitly, so that its mode and owner are
	// ours and not the unpacker's default.
	seen := map[string]bool{}
	var all []entry
	for _, f := range files {
		seen[f.name] = true
		all = append(all, f)
	}
	for _, f := range files {
		for d := path.Dir(f.name); d != "."; d = path.Dir(d) {
			if !seen[d] {
				seen[d] = true
				all = append(all, entry{name: d, mode: dirMode, dir: true})
			}
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return all
}

// layerTar writes the entries as an uncompressed tar: sorted names, one
// fixed time, uid and gid 0, no user-dependent or host-dependent field, so
// that the same inputs give the same bytes.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			ModTime: mtime,
			Uname:   "root",
			Gname:   "root",
			Format:  tar.FormatUSTAR,
		}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("write tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("write %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// caBundle concatenates Debian's Mozilla certificates (the package's own
// files, in name order) into one PEM bundle. Not /etc/ssl/certs: that
// directory also holds whatever local CAs this machine trusts, which do not
// belong in an image.
func caBundle(dir string) ([]byte, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no *.crt in %s (apt-get install ca-certificates)", dir)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes(), nil
}
