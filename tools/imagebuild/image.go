package main

import (
	"bytes"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// meta is what the labels and annotations say about the image.
type meta struct {
	ref      string    // full name, e.g. ghcr.io/timeout-tracer/tracer:0.1.0
	version  string    // org.opencontainers.image.version
	revision string    // org.opencontainers.image.revision: the commit
	source   string    // org.opencontainers.image.source
	created  time.Time // every timestamp: the commit's time
	caSource string    // where the CA bundle came from, "" if none
}

func (m meta) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "timeout-tracer",
		"org.opencontainers.image.description": "Explains why Go requests time out: context deadlines joined with kernel TCP events (eBPF)",
		"org.opencontainers.image.version":     m.version,
		"org.opencontainers.image.revision":    m.revision,
		"org.opencontainers.image.source":      m.source,
		"org.opencontainers.image.created":     m.created.UTC().Format(time.RFC3339),
	}
	if m.caSource != "" {
		l["org.timeout-tracer.ca-certificates"] = m.caSource
	}
	return l
}

// platformImage is one platform's input: its binary and its platform.
type platformImage struct {
	platform v1.Platform
	binary   []byte
}

// buildIndex assembles the multi-platform OCI index: one image a
// platform, each a single layer over an empty base.
func buildIndex(m meta, plats []platformImage, ca, caCopyright []byte) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range plats {
		img, err := buildImage(m, p, ca, caCopyright)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p.platform, err)
		}
		plat := p.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &plat},
		})
	}
	return mutate.Annotations(idx, m.labels()).(v1.ImageIndex), nil
}

func buildImage(m meta, p platformImage, ca, caCopyright []byte) (v1.Image, error) {
	tarBytes, err := layerTar(rootfs(p.binary, ca, caCopyright), m.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: m.created.UTC()}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.platform.Architecture,
		Variant:      p.platform.Variant,
		OS:           p.platform.OS,
		Created:      created,
		Config: v1.Config{
			// The DaemonSet's command ("tracer daemon ...") finds the
			// binary through PATH; `docker run IMAGE check` through the
			// entrypoint. No User: root, as the DaemonSet says (BPF).
			Entrypoint: []string{"/" + binaryPath},
			Env:        []string{envPath},
			Labels:     m.labels(),
			WorkingDir: "/",
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "tools/imagebuild: /" + binaryPath + " (static, CGO_ENABLED=0 -trimpath) and /etc",
			Comment:   m.revision,
		},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, m.labels()).(v1.Image), nil
}
