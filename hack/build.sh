#!/usr/bin/env bash
# The one build of the controller binary: `make build`, the image (hack/build-image.sh
# and the Dockerfile) and the test harness all call it. Static (the image has no libc),
# -trimpath and no symbols (the binary depends on the source only, not on where it was
# built), and stamped with the version and commit that --version and
# sample_controller_build_info report.
#
#   hack/build.sh OUT      builds for GOOS/GOARCH (default: this machine) into OUT
#
# VERSION is the release (default "(devel)"); REVISION the commit (default: git's HEAD,
# with -dirty for uncommitted changes, or "unknown" outside git).
set -o errexit -o nounset -o pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: hack/build.sh OUT" >&2
  exit 2
fi
out="$1"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
VERSION="${VERSION:-(devel)}"
if [[ -z "${REVISION:-}" ]]; then
  if REVISION="$(git -C "${REPO_ROOT}" rev-parse HEAD 2>/dev/null)"; then
    git -C "${REPO_ROOT}" diff --quiet HEAD -- 2>/dev/null || REVISION+="-dirty"
  else
    REVISION=unknown
  fi
fi
VERSION_PKG=github.com/seed-e6610ed6/sample-controller/internal/version
cd "${REPO_ROOT}"
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X '${VERSION_PKG}.version=${VERSION}' -X '${VERSION_PKG}.revision=${REVISION}'" \
  -o "${out}" .
