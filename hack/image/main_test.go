package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// helloOutput is what the test binary prints, to tell that the binary taken out of the
// image is the one that went in and still runs.
const helloOutput = "hello from the image"

// helloBinary is a small static linux/amd64 program, built once for all tests by TestMain,
// and helloARM64 the same for linux/arm64.
var helloBinary, helloARM64 string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "image-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The builds come before any test, so no test's context bounds them.
	ctx := context.Background()
	if helloBinary, err = buildHello(ctx, dir, "amd64"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if helloARM64, err = buildHello(ctx, dir, "arm64"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// buildHello compiles a tiny program the way hack/build-image.sh compiles the controller,
// which is much faster than building the controller itself.
func buildHello(ctx context.Context, dir, arch string) (string, error) {
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"" + helloOutput + "\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hello-"+arch)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the test binary: %w\n%s", err, out)
	}
	return bin, nil
}

// runImage runs the command line in-process and returns what it printed.
func runImage(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("image %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// buildArchive builds an image of binary into dir and returns the archive and the digest
// that build printed.
func buildArchive(t *testing.T, binary, dir string) (archive, digest string) {
	t.Helper()
	archive = filepath.Join(dir, "image.oci.tar")
	digest = strings.TrimSpace(runImage(t, "build", "--binary", binary, "--output", archive, "--tag", "sample-controller:test",
		"--version", "v1.2.3", "--revision", "0123abcd"))
	return archive, digest
}

func TestBuildThenInspect(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	dir := t.TempDir()
	archive, digest := buildArchive(t, helloBinary, dir)
	extracted := filepath.Join(dir, "extracted")

	var got summary
	out := runImage(t, "inspect", "--archive", archive, "--extract-entrypoint", extracted)
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("inspect printed no JSON summary: %v\n%s", err, out)
	}

	t.Run("reports the digest that build printed", func(t *testing.T) {
		if got.Digest != digest {
			t.Errorf("inspect digest %s, build printed %s", got.Digest, digest)
		}
	})
	t.Run("names the image", func(t *testing.T) {
		if got.RefName != "sample-controller:test" {
			t.Errorf("refName %q, want sample-controller:test", got.RefName)
		}
	})
	t.Run("is for linux/amd64", func(t *testing.T) {
		if got.Platform != "linux/amd64" {
			t.Errorf("platform %q, want linux/amd64", got.Platform)
		}
	})
	t.Run("runs the controller as entrypoint", func(t *testing.T) {
		if len(got.Entrypoint) != 1 || got.Entrypoint[0] != "/sample-controller" {
			t.Errorf("entrypoint %q, want [/sample-controller]", got.Entrypoint)
		}
		if len(got.Cmd) != 0 {
			t.Errorf("cmd %q, want none: the Deployment passes the flags", got.Cmd)
		}
	})
	t.Run("runs as the nonroot user", func(t *testing.T) {
		if got.User != "65532:65532" {
			t.Errorf("user %q, want 65532:65532", got.User)
		}
		// Numeric, or the kubelet cannot check runAsNonRoot without reading /etc/passwd.
		uid, gid, _ := strings.Cut(got.User, ":")
		if !isNonRootID(uid) || !isNonRootID(gid) {
			t.Errorf("user %q is not a numeric non-root uid:gid", got.User)
		}
	})
	t.Run("says where it comes from", func(t *testing.T) {
		for key, want := range map[string]string{
			"org.opencontainers.image.source":   "https://github.com/seed-e6610ed6/sample-controller",
			"org.opencontainers.image.version":  "v1.2.3",
			"org.opencontainers.image.revision": "0123abcd",
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  "1970-01-01T00:00:00Z",
		} {
			if got.Labels[key] != want {
				t.Errorf("label %s = %q, want %q", key, got.Labels[key], want)
			}
			if got.Annotations[key] != want {
				t.Errorf("manifest annotation %s = %q, want %q", key, got.Annotations[key], want)
			}
		}
		if got.Labels["org.opencontainers.image.description"] == "" {
			t.Error("no description label")
		}
	})
	t.Run("has one gzip layer", func(t *testing.T) {
		if len(got.Layers) != 1 || got.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("layers %+v, want one OCI gzip layer", got.Layers)
		}
	})

	t.Run("extracts the binary byte for byte", func(t *testing.T) {
		want, err := os.ReadFile(helloBinary)
		if err != nil {
			t.Fatal(err)
		}
		gotBytes, err := os.ReadFile(extracted)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gotBytes, want) {
			t.Errorf("extracted binary (%d bytes) differs from the input (%d bytes)", len(gotBytes), len(want))
		}
		fi, err := os.Stat(extracted)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("extracted mode %v, want 0755", fi.Mode().Perm())
		}
	})
	t.Run("extracts a static executable", func(t *testing.T) {
		f, err := elf.Open(extracted)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("has a %s program header: the binary is not static", p.Type)
			}
		}
		if s := f.Section(".dynamic"); s != nil {
			t.Errorf("has a .dynamic section: the binary is not static")
		}
	})
	t.Run("extracts a binary that runs", func(t *testing.T) {
		if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
			t.Skipf("a linux/amd64 binary does not run on %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		out, err := exec.CommandContext(t.Context(), extracted).Output()
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(out)) != helloOutput {
			t.Errorf("extracted binary printed %q, want %q", out, helloOutput)
		}
	})
}

func isNonRootID(id string) bool {
	n, err := strconv.Atoi(id)
	return err == nil && n > 0
}

func TestBuildIsReproducible(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	first, firstDigest := buildArchive(t, helloBinary, t.TempDir())
	second, secondDigest := buildArchive(t, helloBinary, t.TempDir())
	if firstDigest != secondDigest {
		t.Errorf("two builds of the same binary gave digests %s and %s", firstDigest, secondDigest)
	}
	a, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two builds of the same binary gave different archives")
	}

	t.Run("a different binary gives a different digest", func(t *testing.T) {
		dir := t.TempDir()
		// Bytes after the last section change the file but keep it a valid ELF.
		other := filepath.Join(dir, "other")
		bin, err := os.ReadFile(helloBinary)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(other, append(bin, "trailer"...), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, digest := buildArchive(t, other, dir); digest == firstDigest {
			t.Errorf("a changed binary kept digest %s", digest)
		}
	})
	t.Run("SOURCE_DATE_EPOCH changes the digest", func(t *testing.T) {
		t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
		if _, digest := buildArchive(t, helloBinary, t.TempDir()); digest == firstDigest {
			t.Errorf("another creation time kept digest %s", digest)
		}
	})
}

func TestCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.tar")

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no command", nil, "no command"},
		{"unknown command", []string{"push"}, `unknown command "push"`},
		{"build without --binary", []string{"build", "--output", out}, "needs --binary and --output"},
		{"build without --output", []string{"build", "--binary", helloBinary}, "needs --binary and --output"},
		{"tag without :TAG", []string{"build", "--binary", helloBinary, "--output", out, "--tag", "sample-controller"}, "has no :TAG"},
		{"invalid tag", []string{"build", "--binary", helloBinary, "--output", out, "--tag", "Sample:dev"}, "--tag"},
		{"binary that is not ELF", []string{"build", "--binary", script, "--output", out}, "reading the binary as ELF"},
		{"stray argument", []string{"build", "--binary", helloBinary, "--output", out, "extra"}, "unexpected arguments"},
		{"inspect without --archive", []string{"inspect"}, "needs --archive"},
		{"inspect of a missing archive", []string{"inspect", "--archive", filepath.Join(dir, "missing.tar")}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed build left %s behind (stat: %v)", out, err)
	}
}

// TestMultiPlatformIndex builds one archive from an amd64 and an arm64 binary: an image
// index whose images a container engine picks by platform.
func TestMultiPlatformIndex(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	dir := t.TempDir()
	archive := filepath.Join(dir, "multi.oci.tar")
	digest := strings.TrimSpace(runImage(t, "build", "--binary", helloBinary, "--binary", helloARM64,
		"--output", archive, "--tag", "sample-controller:test", "--version", "v1.2.3"))

	inspect := func(args ...string) summary {
		t.Helper()
		var s summary
		out := runImage(t, append([]string{"inspect", "--archive", archive}, args...)...)
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("inspect printed no JSON summary: %v\n%s", err, out)
		}
		return s
	}
	arm := inspect("--platform", "linux/arm64")
	if arm.Platform != "linux/arm64" || arm.Digest != digest || arm.RefName != "sample-controller:test" {
		t.Errorf("--platform linux/arm64: platform %q, digest %s, name %q; want linux/arm64, the index digest %s, sample-controller:test",
			arm.Platform, arm.Digest, arm.RefName, digest)
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(arm.Platforms, want) {
		t.Errorf("platforms %q, want %q", arm.Platforms, want)
	}
	if arm.Labels["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("the arm64 image's labels %v lack the version", arm.Labels)
	}

	// By default, this machine's platform; its binary comes out and runs.
	extracted := filepath.Join(dir, "extracted")
	host := inspect("--extract-entrypoint", extracted)
	if host.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("default platform %q, want linux/%s", host.Platform, runtime.GOARCH)
	}
	if runtime.GOARCH == "amd64" {
		out, err := exec.CommandContext(t.Context(), extracted).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != helloOutput {
			t.Errorf("the extracted binary printed %q (%v), want %q", out, err, helloOutput)
		}
	}

	a, err := openArchive(archive, "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := validate.Image(a.img); err != nil {
		t.Errorf("the arm64 image in the archive is not valid: %v", err)
	}
	if _, err := openArchive(archive, "linux/s390x"); err == nil {
		t.Error("opening a platform the archive lacks: no error")
	}

	// The same binaries give the same archive.
	again := filepath.Join(dir, "again.oci.tar")
	runImage(t, "build", "--binary", helloBinary, "--binary", helloARM64, "--output", again, "--tag", "sample-controller:test", "--version", "v1.2.3")
	first, _ := os.ReadFile(archive)
	second, _ := os.ReadFile(again)
	if !bytes.Equal(first, second) {
		t.Error("two builds of the same binaries differ")
	}

	// Two binaries for one platform are a mistake.
	var stdout, stderr bytes.Buffer
	if err := run([]string{"build", "--binary", helloBinary, "--binary", helloBinary, "--output", filepath.Join(dir, "x.tar")}, &stdout, &stderr); err == nil {
		t.Error("two amd64 binaries: no error")
	}
}

// TestInspectUnpacksRootfs unpacks the image as a container runtime's bundle holds it:
// the same files, modes and binary that the image's layer has.
func TestInspectUnpacksRootfs(t *testing.T) {
	dir := t.TempDir()
	archive, _ := buildArchive(t, helloBinary, dir)
	rootfs := filepath.Join(dir, "rootfs")
	runImage(t, "inspect", "--archive", archive, "--platform", "linux/amd64", "--rootfs", rootfs)

	var got []string
	err := filepath.WalkDir(rootfs, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		got = append(got, fmt.Sprintf("%s %v", rel, fi.Mode()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		". drwxr-xr-x",
		"etc drwxr-xr-x",
		"etc/group -rw-r--r--",
		"etc/passwd -rw-r--r--",
		"sample-controller -rwxr-xr-x",
	}
	if !slices.Equal(got, want) {
		t.Errorf("unpacked file system:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	bin, err := os.ReadFile(filepath.Join(rootfs, "sample-controller"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile(helloBinary)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bin, in) {
		t.Error("the unpacked entrypoint differs from the binary that went in")
	}

	t.Run("refuses a directory that is not empty", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		err := run([]string{"inspect", "--archive", archive, "--rootfs", rootfs}, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Errorf("unpacking again into %s: %v, want an error saying it is not empty", rootfs, err)
		}
	})
}

// TestBuildAnotherProgram packs a program other than the controller, as the local node's
// pause image is packed: its own entrypoint and title.
func TestBuildAnotherProgram(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "pause.oci.tar")
	runImage(t, "build", "--binary", helloBinary, "--output", archive, "--tag", "localcluster.local/pause:v1",
		"--entrypoint", "/pause", "--title", "pause", "--description", "holds a Pod's namespaces")
	var got summary
	if err := json.Unmarshal([]byte(runImage(t, "inspect", "--archive", archive)), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Entrypoint, []string{"/pause"}) || got.Labels["org.opencontainers.image.title"] != "pause" ||
		got.Labels["org.opencontainers.image.description"] != "holds a Pod's namespaces" || got.RefName != "localcluster.local/pause:v1" {
		t.Errorf("entrypoint %q, labels %v, name %q", got.Entrypoint, got.Labels, got.RefName)
	}
	for _, bad := range []string{"pause", "/", "/bin/pause", "/pause/"} {
		var stdout, stderr bytes.Buffer
		if err := run([]string{"build", "--binary", helloBinary, "--output", archive, "--entrypoint", bad}, &stdout, &stderr); err == nil {
			t.Errorf("--entrypoint %q was accepted", bad)
		}
	}
}
