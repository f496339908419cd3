package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// readTar returns the regular files of a tar archive by name.
func readTar(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = body
	}
}

// TestArchiveIsOCILayout reads the archive with nothing but archive/tar and encoding/json,
// following the image-layout spec, so that a mistake shared by the writer and
// go-containerregistry's reader cannot hide.
func TestArchiveIsOCILayout(t *testing.T) {
	archive, digest := buildArchive(t, helloBinary, t.TempDir())
	files := readTar(t, archive)

	var marker struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(files["oci-layout"], &marker); err != nil || marker.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout is %q (%v), want imageLayoutVersion 1.0.0", files["oci-layout"], err)
	}

	blobs := map[string][]byte{}
	for name, body := range files {
		hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/")
		if !ok {
			if name != "oci-layout" && name != "index.json" {
				t.Errorf("unexpected file %s in the layout", name)
			}
			continue
		}
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); got != hexDigest {
			t.Errorf("blob %s has content with digest sha256:%s", name, got)
		}
		blobs["sha256:"+hexDigest] = body
	}
	used := map[string]bool{}
	// blob checks that a descriptor points at a blob of its size and returns the blob.
	blob := func(what string, d v1.Descriptor) []byte {
		t.Helper()
		body, ok := blobs[d.Digest.String()]
		if !ok {
			t.Fatalf("%s %s is not in blobs/", what, d.Digest)
		}
		if int64(len(body)) != d.Size {
			t.Errorf("%s %s is %d bytes, its descriptor says %d", what, d.Digest, len(body), d.Size)
		}
		used[d.Digest.String()] = true
		return body
	}

	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if index.SchemaVersion != 2 || index.MediaType != types.OCIImageIndex {
		t.Errorf("index.json has schemaVersion %d and mediaType %q, want 2 and %s", index.SchemaVersion, index.MediaType, types.OCIImageIndex)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(index.Manifests))
	}
	desc := index.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	if desc.Digest.String() != digest {
		t.Errorf("index.json points at %s, build printed %s", desc.Digest, digest)
	}
	if desc.Platform == nil || desc.Platform.String() != "linux/amd64" {
		t.Errorf("index.json gives platform %v, want linux/amd64", desc.Platform)
	}
	if ref := desc.Annotations["org.opencontainers.image.ref.name"]; ref != "sample-controller:test" {
		t.Errorf("ref.name annotation %q, want sample-controller:test", ref)
	}

	var manifest v1.Manifest
	if err := json.Unmarshal(blob("manifest", desc), &manifest); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if manifest.SchemaVersion != 2 || manifest.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest has schemaVersion %d and mediaType %q", manifest.SchemaVersion, manifest.MediaType)
	}
	if manifest.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("config media type %q, want %s", manifest.Config.MediaType, types.OCIConfigJSON)
	}
	var config v1.ConfigFile
	if err := json.Unmarshal(blob("config", manifest.Config), &config); err != nil {
		t.Fatalf("config: %v", err)
	}
	if len(config.RootFS.DiffIDs) != len(manifest.Layers) {
		t.Errorf("config lists %d diff_ids for %d layers", len(config.RootFS.DiffIDs), len(manifest.Layers))
	}
	for _, l := range manifest.Layers {
		blob("layer", l)
	}
	for d := range blobs {
		if !used[d] {
			t.Errorf("blob %s is referenced by nothing", d)
		}
	}
}

// TestArchiveReadsBack checks, with go-containerregistry's validator, that the image
// read back from the archive is whole: every digest, size and diff_id verified against
// the content.
func TestArchiveReadsBack(t *testing.T) {
	archive, _ := buildArchive(t, helloBinary, t.TempDir())
	a, err := openArchive(archive, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := validate.Image(a.img); err != nil {
		t.Errorf("the image in the archive is not valid: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.dir); !os.IsNotExist(err) {
		t.Errorf("Close left the unpacked layout %s behind", a.dir)
	}
}

func TestUnpackRefusesEntriesOutsideTheLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  tar.Header
	}{
		{"parent directory", tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Mode: 0o644}},
		{"absolute path", tar.Header{Typeflag: tar.TypeReg, Name: "/escape", Mode: 0o644}},
		{"symlink", tar.Header{Typeflag: tar.TypeSymlink, Name: "index.json", Linkname: "/etc/passwd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "layout")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(parent, "evil.tar")
			f, err := os.Create(file)
			if err != nil {
				t.Fatal(err)
			}
			tw := tar.NewWriter(f)
			if err := tw.WriteHeader(&tc.hdr); err != nil {
				t.Fatal(err)
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}

			if err := unpack(file, dir); err == nil {
				t.Error("unpack accepted the archive")
			}
			if _, err := os.Stat(filepath.Join(parent, "escape")); !os.IsNotExist(err) {
				t.Errorf("an entry was written outside the layout (stat: %v)", err)
			}
		})
	}
}
