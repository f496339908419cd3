// Package version tells which build of the controller is running: for --version, the
// build-info metric and the logs.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time by hack/build.sh (which make build, the Dockerfile and
// hack/build-image.sh call), with
// -ldflags "-X github.com/seed-e6610ed6/sample-controller/internal/version.version=v0.1.0".
// Without it, the module version Go recorded is used: a tag for `go install ...@v0.1.0`,
// "(devel)" for a build from a checkout.
var version string

// revision is set at build time the same way, to the commit; without it, the commit Go
// recorded (go build -buildvcs, off when GOFLAGS says so) is used.
var revision string

// Info describes the running binary.
type Info struct {
	// Version is the release, or "(devel)" for a build from a checkout.
	Version string
	// Revision is the commit the binary was built from, with "-dirty" when the work
	// tree had changes, or "unknown" when Go recorded none (a build outside git).
	Revision  string
	GoVersion string
	Platform  string
}

// Get returns what the binary knows of its own build.
func Get() Info {
	info := Info{Version: version, Revision: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	build, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "(devel)"
		}
		if revision != "" {
			info.Revision = revision
		}
		return info
	}
	if info.Version == "" {
		info.Version = build.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	var vcsRevision, modified string
	for _, s := range build.Settings {
		switch s.Key {
		case "vcs.revision":
			vcsRevision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if vcsRevision != "" {
		info.Revision = vcsRevision
		if modified == "true" {
			info.Revision += "-dirty"
		}
	}
	if revision != "" {
		info.Revision = revision
	}
	return info
}

// String is the line --version prints.
func (i Info) String() string {
	return fmt.Sprintf("sample-controller %s (revision %s, %s, %s)", i.Version, i.Revision, i.GoVersion, i.Platform)
}
