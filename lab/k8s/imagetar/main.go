// Command imagetar packs static binaries into a one-layer OCI image
// archive that `ctr images import` loads under the given name: the
// workload and sandbox images of the end-to-end test's cluster (lab/k8s),
// where no registry is reachable. Reproducible: fixed times and owners,
// sorted entries, no compression, so the same binaries give the same
// digest.
//
//	imagetar -name tt-e2e.local/labapp:e2e -o labapp.tar BINARY...
//
// Each binary goes to /usr/local/bin/<its base name>; the first is the
// entrypoint.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	name := flag.String("name", "", "image name, as ctr and the kubelet see it (registry/repo:tag)")
	out := flag.String("o", "", "output archive")
	flag.Parse()
	if *name == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: imagetar -name NAME -o OUT.tar BINARY...")
		os.Exit(2)
	}
	b, digest, err := build(*name, flag.Args())
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagetar: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(*name, digest)
}

var epoch = time.Unix(0, 0).UTC()

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func desc(mediaType string, b []byte) descriptor {
	h := sha256.Sum256(b)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(h[:]), Size: len(b)}
}

// build returns the archive and the manifest's digest.
func build(name string, bins []string) ([]byte, string, error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
	}
	var entry []string
	for _, bin := range bins {
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, "", err
		}
		p := "usr/local/bin/" + filepath.Base(bin)
		if entry == nil {
			entry = []string{"/" + p}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: int64(len(b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	layerDesc := desc("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": entry,
			"Env":        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return nil, "", err
	}
	configDesc := desc("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return nil, "", err
	}
	manDesc := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	tag := name[strings.LastIndex(name, ":")+1:]
	manDesc.Annotations = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}
	manDesc.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []descriptor{manDesc}})
	if err != nil {
		return nil, "", err
	}
	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	files := []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}
	for _, b := range [][]byte{config, layer.Bytes(), manifest} {
		files = append(files, struct {
			name string
			b    []byte
		}{"blobs/sha256/" + strings.TrimPrefix(desc("", b).Digest, "sha256:"), b})
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
	}
	for _, f := range files {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
		if _, err := aw.Write(f.b); err != nil {
			return nil, "", err
		}
	}
	if err := aw.Close(); err != nil {
		return nil, "", err
	}
	return out.Bytes(), manDesc.Digest, nil
}
