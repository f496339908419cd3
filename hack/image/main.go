// Command image builds the controller's container image without a container engine and
// reads it back. The image runs the same static binary as the Dockerfile's, as the same
// nonroot user, but on an empty base: of distroless/static it keeps only /etc/passwd and
// /etc/group, because the controller needs no CA bundle (it trusts the API server through
// its service account's CA), no time zones and no /tmp. It is written as an OCI archive,
// which podman load and skopeo read.
//
//	image build --binary PATH --output FILE.tar [--tag NAME:TAG] [--entrypoint /NAME]
//	image inspect --archive FILE.tar [--extract-entrypoint PATH] [--rootfs DIR]
//
// --entrypoint, --title and --description pack another static program the same way (the
// local node's pause image); they default to the controller's. build prints the image digest. The same binary gives the same digest and the same
// archive: every timestamp is the Unix epoch, or $SOURCE_DATE_EPOCH when it is set.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
)

const usage = `usage:
  image build --binary PATH --output FILE.tar [--tag NAME:TAG] [--source URL] [--entrypoint /NAME --title T --description D]
  image inspect --archive FILE.tar [--extract-entrypoint PATH] [--rootfs DIR]`

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		// The flag package has printed the usage already.
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// run is main without the process: tests call it with the arguments a user would type.
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("no command\n" + usage)
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:], stdout, stderr)
	case "inspect":
		return runInspect(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var binaryPaths []string
	fs.Func("binary", "Static Linux binary to run as the entrypoint; repeat it, one per architecture, for a multi-platform image index.", func(v string) error {
		binaryPaths = append(binaryPaths, v)
		return nil
	})
	output := fs.String("output", "", "OCI archive to write.")
	tag := fs.String("tag", "", "NAME:TAG recorded in the archive, which podman load uses as the image name.")
	source := fs.String("source", "https://github.com/seed-e6610ed6/sample-controller",
		"Repository recorded in the org.opencontainers.image.source label.")
	entrypoint := fs.String("entrypoint", defaultEntrypoint, "Absolute path of the binary in the image, which runs it.")
	title := fs.String("title", "sample-controller", "Name recorded in the org.opencontainers.image.title label.")
	description := fs.String("description", controllerDescription, "Text recorded in the org.opencontainers.image.description label.")
	version := fs.String("version", "", "Release recorded in the org.opencontainers.image.version label.")
	revision := fs.String("revision", "", "Commit recorded in the org.opencontainers.image.revision label.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(binaryPaths) == 0 || *output == "" {
		return errors.New("build needs --binary and --output")
	}
	if clean := path.Clean(*entrypoint); !path.IsAbs(clean) || clean != *entrypoint || clean == "/" || path.Dir(clean) != "/" {
		return fmt.Errorf("--entrypoint %q is not a file name at the root, such as /pause", *entrypoint)
	}
	if *tag != "" {
		t, err := name.NewTag(*tag)
		if err != nil {
			return fmt.Errorf("--tag: %w", err)
		}
		// A bare name would silently become NAME:latest in one tool and stay bare in another.
		if !strings.HasSuffix(*tag, ":"+t.TagStr()) {
			return fmt.Errorf("--tag %q has no :TAG", *tag)
		}
	}
	created, err := sourceDate()
	if err != nil {
		return err
	}

	labels := ociLabels(*title, *description, *source, *version, *revision, created)
	var images []v1.Image
	seen := map[string]string{}
	for _, path := range binaryPaths {
		binary, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		platform, err := platformOf(binary)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if other, ok := seen[platform.String()]; ok {
			return fmt.Errorf("%s and %s are both for %s", other, path, platform)
		}
		seen[platform.String()] = path
		img, err := buildImage(imageSpec{binary: binary, entrypoint: *entrypoint, platform: platform, created: created, labels: labels})
		if err != nil {
			return err
		}
		images = append(images, img)
	}
	// One binary makes one image; several make an index that a container engine
	// resolves to the image of its own platform.
	var artifact partial.Describable = images[0]
	if len(images) > 1 {
		index, err := buildIndex(images, labels)
		if err != nil {
			return err
		}
		artifact = index
	}
	if err := writeArchiveFile(*output, artifact, *tag, created); err != nil {
		return fmt.Errorf("writing %s: %w", *output, err)
	}
	desc, err := partial.Descriptor(artifact)
	if err != nil {
		return err
	}
	digest := desc.Digest
	fmt.Fprintln(stdout, digest)
	return nil
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	archivePath := fs.String("archive", "", "OCI archive to read.")
	extractTo := fs.String("extract-entrypoint", "", "Also write the entrypoint binary from the image's layers to this path, mode 0755.")
	rootfs := fs.String("rootfs", "", "Also unpack the image's file system, as its layers stack up, into this directory (created; it must be empty), as a container runtime's bundle holds it.")
	platform := fs.String("platform", "", "In an archive with images for several platforms, the one to inspect (os/arch); default linux on this machine's architecture.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *archivePath == "" {
		return errors.New("inspect needs --archive")
	}

	a, err := openArchive(*archivePath, *platform)
	if err != nil {
		return err
	}
	defer a.Close()
	s, err := summarize(a)
	if err != nil {
		return err
	}
	if *extractTo != "" {
		if len(s.Entrypoint) == 0 {
			return errors.New("the image has no entrypoint to extract")
		}
		if err := extractFile(a.img, s.Entrypoint[0], *extractTo); err != nil {
			return fmt.Errorf("extracting the entrypoint: %w", err)
		}
	}
	if *rootfs != "" {
		if err := extractRootfs(a.img, *rootfs); err != nil {
			return fmt.Errorf("unpacking the file system: %w", err)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

const controllerDescription = "Keeps a Deployment for every Foo (samplecontroller.k8s.io/v1alpha1) and reports its progress in the Foo's status."

// parseFlags rejects stray arguments, which would otherwise be ignored without a word.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// sourceDate is the time stamped into the image. $SOURCE_DATE_EPOCH is the convention of
// reproducible builds for "the time of the last change"; without it, the epoch.
func sourceDate() (time.Time, error) {
	v, ok := os.LookupEnv("SOURCE_DATE_EPOCH")
	if !ok || v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds: %w", v, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// ociLabels are the OCI annotation keys the image carries, both as config labels (what
// docker inspect and podman show) and as manifest annotations (what registries show).
// Empty values are left out.
func ociLabels(title, description, source, version, revision string, created time.Time) map[string]string {
	labels := map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.created":     created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
	for k, v := range labels {
		if v == "" {
			delete(labels, k)
		}
	}
	return labels
}
