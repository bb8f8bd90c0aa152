package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuild: the same binaries give the same bytes; the archive is an OCI
// layout whose index names the image for containerd and whose manifest's
// layer holds the binary, executable, at /usr/local/bin.
func TestBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, d1, err := build("tt-e2e.local/prog:e2e", []string{bin})
	if err != nil {
		t.Fatal(err)
	}
	b, d2, err := build("tt-e2e.local/prog:e2e", []string{bin})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || d1 != d2 {
		t.Fatalf("two builds differ: %s, %s", d1, d2)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	m := index.Manifests[0]
	if m.Digest != d1 || m.Annotations["io.containerd.image.name"] != "tt-e2e.local/prog:e2e" {
		t.Errorf("index entry %+v, want digest %s named tt-e2e.local/prog:e2e", m, d1)
	}
	var man struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(m.Digest, "sha256:")], &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	layer := files["blobs/sha256/"+strings.TrimPrefix(man.Layers[0].Digest, "sha256:")]
	lr := tar.NewReader(bytes.NewReader(layer))
	found := false
	for {
		h, err := lr.Next()
		if err != nil {
			break
		}
		if h.Name == "usr/local/bin/prog" && h.Mode == 0o755 {
			found = true
		}
	}
	if !found {
		t.Error("the layer has no executable usr/local/bin/prog")
	}
	if _, ok := files["blobs/sha256/"+strings.TrimPrefix(man.Config.Digest, "sha256:")]; !ok {
		t.Error("the config blob is missing")
	}
}
