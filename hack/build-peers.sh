#!/usr/bin/env bash
# Builds the bench's peers, the controllers a user would pick instead of ours, into
# _output/bin, for test/bench's --peers. Both serve the same CRD and the same job.
#
#   classic             k8s.io/sample-controller (CLASSIC_VERSION, default v0.37.1) at
#                       its defaults: client-go's 5 requests per second (burst 10), two
#                       workers, a 30 s informer resync; it takes -kubeconfig and has no
#                       metrics or probe endpoints. -> _output/bin/peer-classic
#   controller-runtime  test/bench/controllerruntime, the job as a kubebuilder user
#                       writes it (a module of its own). -> _output/bin/peer-controller-runtime
#                       The bench's controller-runtime-tuned peer is the same binary.
#
# Usage: hack/build-peers.sh [classic] [controller-runtime]   (default: both)
#
# The classic one is not `go install k8s.io/sample-controller@VERSION`: that also asks
# the module proxy for the module's version list (to report deprecations), which the
# proxy here refuses. A scratch module pinned to the version builds the same main
# package.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${REPO_ROOT}/_output/bin"
mkdir -p "${BIN_DIR}"

build_classic() {
  local version="${CLASSIC_VERSION:-v0.37.1}"
  echo "build-peers: classic, k8s.io/sample-controller@${version}" >&2
  (
    scratch="$(mktemp -d)"
    trap 'rm -rf "${scratch}"' EXIT
    cd "${scratch}"
    go mod init classic-build >/dev/null 2>&1
    # go get lists every module it adds; show that only when it fails.
    if ! go get "k8s.io/sample-controller@${version}" 2>get.log; then
      cat get.log >&2
      exit 1
    fi
    go build -o "${BIN_DIR}/peer-classic" k8s.io/sample-controller
  )
}

build_controller_runtime() {
  echo "build-peers: controller-runtime, test/bench/controllerruntime" >&2
  (cd "${REPO_ROOT}/test/bench/controllerruntime" && go build -o "${BIN_DIR}/peer-controller-runtime" .)
}

peers=("$@")
[[ ${#peers[@]} -gt 0 ]] || peers=(classic controller-runtime)
for peer in "${peers[@]}"; do
  case "${peer}" in
    classic) build_classic ;;
    controller-runtime) build_controller_runtime ;;
    *)
      echo "build-peers: no peer ${peer}; there are: classic controller-runtime" >&2
      exit 2
      ;;
  esac
done
