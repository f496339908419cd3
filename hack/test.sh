#!/usr/bin/env bash
# The whole test suite, as `make test` and CI run it. Prints how long each stage took.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${REPO_ROOT}"
mkdir -p _output

stage() {
  local name="$1"
  shift
  echo "=== ${name}"
  local start=${SECONDS}
  "$@"
  echo "=== ${name}: done in $((SECONDS - start))s"
}

check_gofmt() {
  local unformatted
  unformatted="$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go' | grep -v '^pkg/generated/'))"
  if [[ -n "${unformatted}" ]]; then
    echo "gofmt would change these files:" >&2
    echo "${unformatted}" >&2
    return 1
  fi
}

unit_tests() {
  go test -race -count=1 -coverprofile=_output/unit-cover.out ./...
  # Coverage of the controller itself, the file this suite exists to prove.
  awk -F'[ :,]' 'NR > 1 && $1 ~ /\/controller\.go$/ { n = $(NF-1); total += n; if ($NF > 0) covered += n }
    END { printf "coverage of controller.go: %.1f%% of %d statements\n", 100 * covered / total, total }' \
    _output/unit-cover.out
}

stage "gofmt" check_gofmt
stage "verify-codegen" hack/verify-codegen.sh
stage "go vet" go vet ./...
stage "unit tests (-race)" unit_tests
