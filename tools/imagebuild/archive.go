package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// containerd's import names the image after this annotation of the
// index.json entry (ctr images import, and the CRI's image store under
// namespace k8s.io).
const annotationContainerdName = "io.containerd.image.name"

// writeArchive writes the index as an OCI image layout in one tar
// (oci-layout, index.json, blobs/sha256/...): index.json holds one entry,
// the multi-platform index, named by ref. Entries are sorted, times fixed,
// owners root: the same index gives the same bytes.
func writeArchive(w io.Writer, idx v1.ImageIndex, ref, tag string, mtime time.Time) error {
	blobs := map[string][]byte{}
	if err := collectIndex(idx, blobs); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	top := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIImageIndex,
			Digest:    d,
			Size:      int64(len(raw)),
			Annotations: map[string]string{
				annotationContainerdName: ref,
				// The OCI spec's own name: the tag alone.
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": indexJSON,
	}
	for h, b := range blobs {
		files["blobs/sha256/"+h] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.SortFunc(names, strings.Compare)

	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: dirMode, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}); err != nil {
			return err
		}
	}
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Size: int64(len(b)), Mode: fileMode, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}); err != nil {
			return fmt.Errorf("write %s: %w", n, err)
		}
		if _, err := tw.Write(b); err != nil {
			return fmt.Errorf("write %s: %w", n, err)
		}
	}
	return tw.Close()
}

// collectIndex gathers the raw bytes of the index, its images, their
// configs and layers, keyed by hex digest.
func collectIndex(idx v1.ImageIndex, blobs map[string][]byte) error {
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	blobs[d.Hex] = raw
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("image %s: %w", desc.Digest, err)
		}
		if err := collectImage(img, blobs); err != nil {
			return err
		}
	}
	return nil
}

func collectImage(img v1.Image, blobs map[string][]byte) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	blobs[d.Hex] = raw
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return err
	}
	blobs[cd.Hex] = cfg
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %s: %w", ld, err)
		}
		blobs[ld.Hex] = b
	}
	return nil
}
