#!/usr/bin/env bash
# Builds the classic controller, k8s.io/sample-controller, into
# _output/bin/sample-controller-classic, for the bench's --controller-binary (test/bench)
# to compare against. It serves the same CRD. Its client has client-go's default limit
# of 5 requests per second (burst 10), two workers and a 30 s informer resync; it takes
# -kubeconfig and has no metrics or probe endpoints.
#
# Not `go install k8s.io/sample-controller@VERSION`: that also asks the module proxy for
# the module's version list (to report deprecations), which the proxy here refuses, and
# it would name the binary sample-controller, the name of `make build`'s. A scratch
# module pinned to the version builds the same main package.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${REPO_ROOT}/_output/bin"
VERSION="${CLASSIC_VERSION:-v0.37.1}"
OUT="${BIN_DIR}/sample-controller-classic"

scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT

echo "build-classic: building k8s.io/sample-controller@${VERSION}" >&2
cd "${scratch}"
go mod init classic-build 2>/dev/null
# go get lists every module it adds; show that only when it fails.
if ! go get "k8s.io/sample-controller@${VERSION}" 2>"${scratch}/get.log"; then
  cat "${scratch}/get.log" >&2
  exit 1
fi
mkdir -p "${BIN_DIR}"
go build -o "${OUT}" k8s.io/sample-controller
echo "build-classic: ${OUT}" >&2
