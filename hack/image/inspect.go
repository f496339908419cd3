package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// summary is what inspect prints: the facts a reviewer or a test checks before trusting
// an image.
type summary struct {
	Digest   string `json:"digest"`
	RefName  string `json:"refName,omitempty"`
	Platform string `json:"platform"`
	// Platforms are those the archive has images for: one, or several in an index.
	Platforms  []string          `json:"platforms"`
	Created    time.Time         `json:"created"`
	User       string            `json:"user"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        []string          `json:"env,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Annotations are the image manifest's.
	Annotations map[string]string `json:"annotations,omitempty"`
	Layers      []layerSummary    `json:"layers"`
}

type layerSummary struct {
	Digest    string `json:"digest"`
	MediaType string `json:"mediaType"`
	// Size is compressed, as it is stored and pulled.
	Size int64 `json:"size"`
}

func summarize(a *archive) (summary, error) {
	cf, err := a.img.ConfigFile()
	if err != nil {
		return summary{}, fmt.Errorf("reading the config: %w", err)
	}
	manifest, err := a.img.Manifest()
	if err != nil {
		return summary{}, fmt.Errorf("reading the manifest: %w", err)
	}
	s := summary{
		Digest:      a.desc.Digest.String(),
		RefName:     a.desc.Annotations[refNameAnnotation],
		Created:     cf.Created.Time,
		User:        cf.Config.User,
		Entrypoint:  cf.Config.Entrypoint,
		Cmd:         cf.Config.Cmd,
		Env:         cf.Config.Env,
		WorkingDir:  cf.Config.WorkingDir,
		Labels:      cf.Config.Labels,
		Annotations: manifest.Annotations,
		Layers:      []layerSummary{},
		Platforms:   a.platforms,
	}
	if p := cf.Platform(); p != nil {
		s.Platform = p.String()
	}
	for _, l := range manifest.Layers {
		s.Layers = append(s.Layers, layerSummary{Digest: l.Digest.String(), MediaType: string(l.MediaType), Size: l.Size})
	}
	return s, nil
}

// extractFile copies the regular file at name in the image's file system, as the layers
// stack up, to dst with mode 0755. dst is written under a temporary name and renamed, so a
// reader never runs a half-written binary.
func extractFile(img v1.Image, name, dst string) (err error) {
	want := strings.TrimPrefix(path.Clean("/"+name), "/")
	fs := mutate.Extract(img)
	defer fs.Close()

	tr := tar.NewReader(fs)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s is not in the image", name)
		}
		if err != nil {
			return fmt.Errorf("reading the image's files: %w", err)
		}
		if strings.TrimPrefix(path.Clean("/"+hdr.Name), "/") != want {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("%s in the image is not a regular file (tar type %q)", name, hdr.Typeflag)
		}
		return writeExecutable(dst, tr)
	}
}

// extractRootfs writes the image's file system into dir, which must be empty or not
// exist: directories and regular files with their modes, as the image's only layer has
// them. os.Root keeps every name inside dir. Ownership is left to the caller: run as
// root, everything is root's, as in the image.
func extractRootfs(img v1.Image, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err != nil {
		return err
	} else if len(entries) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	fs := mutate.Extract(img)
	defer fs.Close()
	return unpackTar(tar.NewReader(fs), root)
}

func writeExecutable(dst string, body io.Reader) error {
	return replaceFile(dst, 0o755, func(w io.Writer) error {
		if _, err := io.Copy(w, body); err != nil {
			return fmt.Errorf("writing %s: %w", dst, err)
		}
		return nil
	})
}
