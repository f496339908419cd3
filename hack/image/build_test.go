package main

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImageFiles checks the file system the controller sees: the layout of
// distroless/static:nonroot that the controller needs, and nothing it could write to.
func TestImageFiles(t *testing.T) {
	binary, err := os.ReadFile(helloBinary)
	if err != nil {
		t.Fatal(err)
	}
	img, err := buildImage(imageSpec{
		binary:     binary,
		entrypoint: defaultEntrypoint,
		platform:   v1.Platform{OS: "linux", Architecture: "amd64"},
		created:    time.Unix(0, 0).UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}

	type file struct {
		mode fs.FileMode
		body string
	}
	got := map[string]file{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[hdr.Name] = file{mode: hdr.FileInfo().Mode(), body: string(body)}

		if hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root so that the controller cannot change it", hdr.Name, hdr.Uid, hdr.Gid)
		}
		if hdr.Mode&0o022 != 0 {
			t.Errorf("%s has mode %o, writable by group or others", hdr.Name, hdr.Mode)
		}
		if !hdr.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s has time %v, want the epoch for reproducible builds", hdr.Name, hdr.ModTime)
		}
	}

	want := map[string]fs.FileMode{
		"etc":               fs.ModeDir | 0o755,
		"etc/group":         0o644,
		"etc/passwd":        0o644,
		"sample-controller": 0o755,
	}
	if len(got) != len(want) {
		names := make([]string, 0, len(got))
		for name := range got {
			names = append(names, name)
		}
		t.Errorf("the image holds %q, want exactly %d entries", names, len(want))
	}
	for name, mode := range want {
		f, ok := got[name]
		if !ok {
			t.Errorf("%s is missing", name)
			continue
		}
		if f.mode != mode {
			t.Errorf("%s has mode %v, want %v", name, f.mode, mode)
		}
	}
	if got["sample-controller"].body != string(binary) {
		t.Error("sample-controller differs from the binary")
	}
	for _, tc := range []struct{ file, line string }{
		{"etc/passwd", "nonroot:x:65532:65532:"},
		{"etc/passwd", "root:x:0:0:"},
		{"etc/group", "nonroot:x:65532:"},
		{"etc/group", "root:x:0:"},
	} {
		if !hasLinePrefix(got[tc.file].body, tc.line) {
			t.Errorf("%s has no line starting %q:\n%s", tc.file, tc.line, got[tc.file].body)
		}
	}
}

func hasLinePrefix(text, prefix string) bool {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
