package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/timeout-tracer/tracer/deploy"
)

var testMeta = meta{
	ref:      "example.org/tracer:1.2.3",
	version:  "1.2.3",
	revision: "0123456789abcdef0123456789abcdef01234567",
	source:   "https://example.org/tracer",
	created:  time.Unix(1700000000, 0).UTC(),
	caSource: "test bundle",
}

func testPlatforms() []platformImage {
	return []platformImage{
		{platform: v1.Platform{OS: "linux", Architecture: "amd64"}, binary: []byte("amd64 binary")},
		{platform: v1.Platform{OS: "linux", Architecture: "arm64"}, binary: []byte("arm64 binary")},
	}
}

func archive(t *testing.T, m meta) []byte {
	t.Helper()
	idx, err := buildIndex(m, testPlatforms(), []byte("CA\n"), []byte("copyright\n"))
	if err != nil {
		t.Fatal(err)
	}
	tag, err := tagOf(m.ref)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, idx, m.ref, tag, m.created); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The same inputs give the same bytes (maps are walked in random order:
// several runs would show it); any input changed changes them.
func TestArchiveReproducible(t *testing.T) {
	a := archive(t, testMeta)
	for range 5 {
		if !bytes.Equal(a, archive(t, testMeta)) {
			t.Fatal("two builds from the same inputs differ")
		}
	}
	m := testMeta
	m.revision = strings.Repeat("f", 40)
	if bytes.Equal(a, archive(t, m)) {
		t.Error("another revision gave the same archive")
	}
	m = testMeta
	m.created = m.created.Add(time.Second)
	if bytes.Equal(a, archive(t, m)) {
		t.Error("another source date gave the same archive")
	}
}

// readTar returns the files of a tar by name, failing on unsorted names,
// another time than mtime or an owner other than root.
func readTar(t *testing.T, r io.Reader, mtime time.Time) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	tr := tar.NewReader(r)
	files, heads := map[string][]byte{}, map[string]*tar.Header{}
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" {
			t.Errorf("%s: mtime %v uid %d gid %d (%s/%s), want %v and root", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname, mtime)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		files[strings.TrimSuffix(h.Name, "/")], heads[strings.TrimSuffix(h.Name, "/")] = b, h
	}
	if !slices.IsSorted(names) {
		t.Errorf("entries not sorted: %v", names)
	}
	return files, heads
}

func blob(t *testing.T, files map[string][]byte, d v1.Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Digest.Hex]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != d.Digest.Hex || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content does not match its descriptor", d.Digest)
	}
	return b
}

// The archive is an OCI layout whose index.json names the multi-platform
// index as containerd's import expects, and each platform's image holds
// its own binary, runs it as the entrypoint and carries the labels.
func TestArchiveLayout(t *testing.T) {
	files, _ := readTar(t, bytes.NewReader(archive(t, testMeta)), testMeta.created)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", files["oci-layout"])
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations[annotationContainerdName] != testMeta.ref ||
		top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Fatalf("index.json %s: want one entry named %s", files["index.json"], testMeta.ref)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(blob(t, files, top.Manifests[0]), &idx); err != nil {
		t.Fatal(err)
	}
	if idx.Annotations["org.opencontainers.image.version"] != "1.2.3" || idx.Annotations["org.opencontainers.image.revision"] != testMeta.revision ||
		idx.Annotations["org.opencontainers.image.source"] != testMeta.source {
		t.Errorf("index annotations %v", idx.Annotations)
	}
	var archs []string
	for _, d := range idx.Manifests {
		archs = append(archs, d.Platform.Architecture)
		var m v1.Manifest
		if err := json.Unmarshal(blob(t, files, d), &m); err != nil {
			t.Fatal(err)
		}
		var cfg v1.ConfigFile
		if err := json.Unmarshal(blob(t, files, m.Config), &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != d.Platform.Architecture || cfg.OS != "linux" || !cfg.Created.Equal(testMeta.created) {
			t.Errorf("%s: config says %s/%s created %v", d.Platform.Architecture, cfg.OS, cfg.Architecture, cfg.Created)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/tracer"}) || !slices.Contains(cfg.Config.Env, "PATH=/usr/local/bin:/usr/bin:/bin") || cfg.Config.User != "" {
			t.Errorf("%s: entrypoint %v env %v user %q", d.Platform.Architecture, cfg.Config.Entrypoint, cfg.Config.Env, cfg.Config.User)
		}
		for _, k := range []string{"version", "revision", "source"} {
			if cfg.Config.Labels["org.opencontainers.image."+k] != idx.Annotations["org.opencontainers.image."+k] {
				t.Errorf("%s: label %s %q, index says %q", d.Platform.Architecture, k, cfg.Config.Labels["org.opencontainers.image."+k], idx.Annotations["org.opencontainers.image."+k])
			}
		}
		if len(m.Layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
			t.Fatalf("%s: %d layers, want 1", d.Platform.Architecture, len(m.Layers))
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
		if err != nil {
			t.Fatal(err)
		}
		layer, heads := readTar(t, zr, testMeta.created)
		want := map[string]int64{"etc": 0o755, "etc/passwd": 0o644, "etc/group": 0o644, "etc/nsswitch.conf": 0o644,
			"etc/ssl/certs/ca-certificates.crt": 0o644, "tmp": 0o1777, "usr/local/bin/tracer": 0o755}
		for name, mode := range want {
			if h := heads[name]; h == nil {
				t.Errorf("%s: no %s", d.Platform.Architecture, name)
			} else if h.Mode != mode {
				t.Errorf("%s: %s mode %o, want %o", d.Platform.Architecture, name, h.Mode, mode)
			}
		}
		if string(layer["usr/local/bin/tracer"]) != d.Platform.Architecture+" binary" {
			t.Errorf("%s image holds binary %q", d.Platform.Architecture, layer["usr/local/bin/tracer"])
		}
		if !strings.HasPrefix(string(layer["etc/passwd"]), "root:x:0:0:") {
			t.Errorf("passwd %q", layer["etc/passwd"])
		}
	}
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Errorf("platforms %v", archs)
	}
}

// The image's name is the manifest's, by construction.
func TestRefIsTheManifestsImage(t *testing.T) {
	want, err := deploy.Image()
	if err != nil {
		t.Fatal(err)
	}
	got, err := config{}.imageRef()
	if err != nil || got != want {
		t.Errorf("imageRef = %q, %v; the manifest runs %q", got, err, want)
	}
	if tag, err := tagOf(want); err != nil || tag == "latest" || tag == "" {
		t.Errorf("the manifest's image %q: tag %q (%v), want a version", want, tag, err)
	}
	for _, bad := range []string{"localhost:5000/tracer", "tracer", "x/tracer@sha256:" + strings.Repeat("0", 64)} {
		if _, err := tagOf(bad); err == nil {
			t.Errorf("tagOf(%q) accepted a reference without a tag", bad)
		}
	}
	if tag, err := tagOf("localhost:5000/tracer:9"); err != nil || tag != "9" {
		t.Errorf("tagOf with a registry port = %q, %v", tag, err)
	}
}

func TestCABundle(t *testing.T) {
	dir := t.TempDir()
	for name, s := range map[string]string{"b.crt": "B\n", "a.crt": "A", "c.pem": "not a .crt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := caBundle(dir)
	if err != nil || string(b) != "A\nB\n" {
		t.Errorf("caBundle = %q, %v; want the .crt files in name order, each ending in a newline", b, err)
	}
	if _, err := caBundle(t.TempDir()); err == nil {
		t.Error("an empty directory gave a bundle")
	}
}
