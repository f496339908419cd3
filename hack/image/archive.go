package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names an image inside an OCI layout; podman load takes it as the name
// of the loaded image, and skopeo matches it against the :REF of oci-archive:FILE:REF.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// writeArchiveFile writes the archive to file; see replaceFile.
func writeArchiveFile(file string, artifact partial.Describable, refName string, mtime time.Time) error {
	return replaceFile(file, 0o644, func(w io.Writer) error {
		return writeArchive(w, artifact, refName, mtime)
	})
}

// replaceFile writes a file next to path with write, gives it mode, and renames it
// into place, so that an interrupted write never leaves a truncated file behind under
// the real name.
func replaceFile(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	// Chmod rather than a create mode, which the umask would narrow.
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeArchive writes artifact, a v1.Image or a v1.ImageIndex of images, as an OCI image
// layout packed in a tar archive, the format that skopeo and podman call oci-archive.
// Every entry carries the same time and owner, so the same image gives the same archive
// byte for byte, not only the same digest.
func writeArchive(w io.Writer, artifact partial.Describable, refName string, mtime time.Time) error {
	var images []v1.Image
	var indexManifest []byte
	desc, err := partial.Descriptor(artifact)
	if err != nil {
		return fmt.Errorf("describing the image: %w", err)
	}
	switch a := artifact.(type) {
	case v1.Image:
		images = []v1.Image{a}
		configFile, err := a.ConfigFile()
		if err != nil {
			return fmt.Errorf("reading the config: %w", err)
		}
		desc.Platform = configFile.Platform()
	case v1.ImageIndex:
		if indexManifest, err = a.RawManifest(); err != nil {
			return fmt.Errorf("reading the image index: %w", err)
		}
		m, err := a.IndexManifest()
		if err != nil {
			return fmt.Errorf("reading the image index: %w", err)
		}
		for _, d := range m.Manifests {
			img, err := a.Image(d.Digest)
			if err != nil {
				return fmt.Errorf("opening image %s of the index: %w", d.Digest, err)
			}
			images = append(images, img)
		}
	default:
		return fmt.Errorf("cannot write a %T", artifact)
	}
	if refName != "" {
		desc.Annotations = map[string]string{refNameAnnotation: refName}
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     []v1.Descriptor{*desc},
	})
	if err != nil {
		return fmt.Errorf("encoding index.json: %w", err)
	}

	tw := tar.NewWriter(w)
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: mtime})
	}
	file := func(name string, size int64, body io.Reader) error {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: mtime}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if _, err := io.Copy(tw, body); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		return nil
	}
	blob := func(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

	if err := file("oci-layout", int64(len(layoutMarker)), bytes.NewReader(layoutMarker)); err != nil {
		return err
	}
	if err := dir("blobs/"); err != nil {
		return err
	}
	if err := dir("blobs/sha256/"); err != nil {
		return err
	}
	for _, img := range images {
		if err := writeImageBlobs(img, file, blob); err != nil {
			return err
		}
	}
	if indexManifest != nil {
		if err := file(blob(desc.Digest), int64(len(indexManifest)), bytes.NewReader(indexManifest)); err != nil {
			return err
		}
	}
	// Last, as in a layout on disk: it names only blobs that are already there.
	if err := file("index.json", int64(len(index)), bytes.NewReader(index)); err != nil {
		return err
	}
	return tw.Close()
}

// writeImageBlobs writes the layers, the config and the manifest of img with file, at
// the paths blob gives their digests.
func writeImageBlobs(img v1.Image, file func(name string, size int64, body io.Reader) error, blob func(v1.Hash) string) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("listing the layers: %w", err)
	}
	for _, layer := range layers {
		digest, err := layer.Digest()
		if err != nil {
			return fmt.Errorf("hashing a layer: %w", err)
		}
		size, err := layer.Size()
		if err != nil {
			return fmt.Errorf("sizing layer %s: %w", digest, err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return fmt.Errorf("reading layer %s: %w", digest, err)
		}
		err = file(blob(digest), size, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("reading the config: %w", err)
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("hashing the config: %w", err)
	}
	if err := file(blob(configDigest), int64(len(config)), bytes.NewReader(config)); err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("reading the manifest: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("hashing the manifest: %w", err)
	}
	return file(blob(digest), int64(len(manifest)), bytes.NewReader(manifest))
}

// layoutMarker is the oci-layout file that tells readers which version of the layout
// spec the directory follows.
var layoutMarker = []byte(`{"imageLayoutVersion":"1.0.0"}`)

// archive is an OCI archive unpacked into a temporary directory, which layout reads blobs
// from lazily; Close removes it.
type archive struct {
	dir string
	// desc is the archive's entry in index.json: one image, or an index of images for
	// several platforms.
	desc v1.Descriptor
	// img is the image for the platform asked for, or the only one.
	img v1.Image
	// platforms are those the archive has images for, in its order.
	platforms []string
}

// openArchive unpacks an OCI archive holding one image or one index of images, and
// opens the image for platform (os/arch[/variant]); an empty platform takes the only
// image there is, or linux on this machine's architecture.
func openArchive(file, platform string) (_ *archive, err error) {
	dir, err := os.MkdirTemp("", "oci-archive-")
	if err != nil {
		return nil, err
	}
	a := &archive{dir: dir}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := unpack(file, dir); err != nil {
		return nil, fmt.Errorf("unpacking %s: %w", file, err)
	}

	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout in %s: %w", file, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading index.json in %s: %w", file, err)
	}
	if len(manifest.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d entries, want exactly 1 image or image index", file, len(manifest.Manifests))
	}
	a.desc = manifest.Manifests[0]

	// The images, with the index that holds them.
	type entry struct {
		desc  v1.Descriptor
		index v1.ImageIndex
	}
	var images []entry
	switch {
	case a.desc.MediaType.IsImage():
		images = append(images, entry{a.desc, index})
	case a.desc.MediaType.IsIndex():
		child, err := index.ImageIndex(a.desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("opening image index %s in %s: %w", a.desc.Digest, file, err)
		}
		m, err := child.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("reading image index %s in %s: %w", a.desc.Digest, file, err)
		}
		for _, d := range m.Manifests {
			if d.MediaType.IsImage() {
				images = append(images, entry{d, child})
			}
		}
	default:
		return nil, fmt.Errorf("%s holds a %s, want an image or an image index", file, a.desc.MediaType)
	}

	if platform == "" && len(images) > 1 {
		// The image this machine can run, as a container engine would pull.
		platform = "linux/" + runtime.GOARCH
	}
	var chosen *entry
	for i, e := range images {
		p := "unknown"
		if e.desc.Platform != nil {
			p = e.desc.Platform.String()
		}
		a.platforms = append(a.platforms, p)
		if p == platform || (platform == "" && len(images) == 1) {
			chosen = &images[i]
		}
	}
	if chosen == nil {
		return nil, fmt.Errorf("%s has no image for platform %q; it has %v", file, platform, a.platforms)
	}
	if a.img, err = chosen.index.Image(chosen.desc.Digest); err != nil {
		return nil, fmt.Errorf("opening image %s in %s: %w", chosen.desc.Digest, file, err)
	}
	return a, nil
}

func (a *archive) Close() error {
	return os.RemoveAll(a.dir)
}

// unpack extracts the directories and regular files of a tar archive into dir. os.Root
// confines every name to dir, so an archive from elsewhere cannot write outside it.
func unpack(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return unpackTar(tar.NewReader(f), root)
}

// unpackTar writes the directories and regular files of tr into root with their modes,
// and refuses anything else: OCI layouts and this tool's image layers hold nothing
// else.
func unpackTar(tr *tar.Reader, root *os.Root) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// Names that leave root (.., absolute) are left for os.Root to refuse.
		name := path.Clean(hdr.Name)
		if name == "." {
			continue
		}
		mode := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return err
			}
			if err := unpackFile(root, name, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: only files and directories are expected, not tar type %q", hdr.Name, hdr.Typeflag)
		}
		// After writing: the umask must not narrow the archive's mode.
		if err := root.Chmod(name, mode); err != nil {
			return err
		}
	}
}

func unpackFile(root *os.Root, name string, body io.Reader) error {
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, body); err != nil {
		out.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return out.Close()
}
