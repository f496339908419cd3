package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// defaultEntrypoint is where the controller sits in its image; the Dockerfile copies
	// it to the same place.
	defaultEntrypoint = "/sample-controller"

	// nonrootUser is the user and group that distroless/static:nonroot runs as, so that the
	// Deployment's runAsUser fits images from either build.
	nonrootUser = "65532:65532"
)

// passwd and group name the image's users for tools that map ids to names. The nonroot
// account has no home: nothing in the image is meant to be written, and the Deployment
// mounts the root file system read-only.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// imageSpec is everything that decides the image: the same spec gives the same digest.
type imageSpec struct {
	binary []byte
	// entrypoint is the binary's absolute path in the image.
	entrypoint string
	platform   v1.Platform
	// created stamps the config, the history and every file, in place of the wall clock.
	created time.Time
	labels  map[string]string
}

// buildImage assembles the image from scratch: one layer with the files of rootfsLayer,
// and a config that runs the binary as the nonroot user.
func buildImage(spec imageSpec) (v1.Image, error) {
	layerTar, err := rootfsLayer(spec.binary, spec.entrypoint, spec.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer),
		// The layer is pulled on every node that runs the controller, so it is worth the
		// extra second of compression.
		tarball.WithCompressionLevel(gzip.BestCompression),
		// Compressed once for the digest and reused when the archive is written.
		tarball.WithCompressedCaching,
	)
	if err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}

	created := v1.Time{Time: spec.created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Created:      created,
		OS:           spec.platform.OS,
		Architecture: spec.platform.Architecture,
		Variant:      spec.platform.Variant,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:       nonrootUser,
			Entrypoint: []string{spec.entrypoint},
			WorkingDir: "/",
			Labels:     spec.labels,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "hack/image build",
			Comment:   "static binary at " + spec.entrypoint + ", /etc/passwd and /etc/group",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	return mutate.Annotations(img, spec.labels).(v1.Image), nil
}

// rootfsLayer returns the uncompressed tar of the image's only layer. Everything is owned
// by root and nothing is writable by others, so the controller, running as nonroot, can
// change nothing in its own image.
func rootfsLayer(binary []byte, entrypoint string, mtime time.Time) ([]byte, error) {
	entries := []struct {
		hdr  tar.Header
		body []byte
	}{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644}, body: []byte(group)},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644}, body: []byte(passwd)},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: entrypoint[1:], Mode: 0o755}, body: binary},
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		hdr.Size = int64(len(e.body))
		hdr.ModTime = mtime
		hdr.Uname, hdr.Gname = "root", "root"
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, fmt.Errorf("writing %s to the layer: %w", hdr.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("writing %s to the layer: %w", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the layer: %w", err)
	}
	return buf.Bytes(), nil
}

// buildIndex puts images, one per platform, in an OCI image index carrying the same
// annotations as each image.
func buildIndex(images []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	var index v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("reading an image's config: %w", err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: cf.Platform()},
		})
	}
	return mutate.Annotations(index, annotations).(v1.ImageIndex), nil
}
