package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	info := Get()
	if info.Version == "" || info.Revision == "" {
		t.Errorf("Get() = %+v, want a version and a revision, even if unknown", info)
	}
	if info.GoVersion != runtime.Version() {
		t.Errorf("GoVersion = %q, want %q", info.GoVersion, runtime.Version())
	}
	if s := info.String(); !strings.HasPrefix(s, "sample-controller "+info.Version+" (revision "+info.Revision) {
		t.Errorf("String() = %q", s)
	}
}

func TestGetLinkerVersion(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "v9.9.9", "0123abcd"
	if got := Get(); got.Version != "v9.9.9" || got.Revision != "0123abcd" {
		t.Errorf("Get() = %+v with -X version=v9.9.9 -X revision=0123abcd", got)
	}
}
