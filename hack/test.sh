#!/usr/bin/env bash
# The whole test suite, as `make test` and CI run it. Prints how long each stage took.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${REPO_ROOT}"
mkdir -p _output
# make exports GOTOOLCHAIN from go.mod's toolchain line; this says which Go runs.
go version

# Everything but the race detector is built as hack/build.sh builds the binary: without
# cgo, with -trimpath. Then the code generators, the control plane, lint, the image, the
# tools' tests and the suites share one compilation of what they have in common; the
# race detector needs cgo and compiles its own anyway.
#
# Every go test runs with -vet=off: the lint stage runs every analyzer of go vet on the
# same packages (govet in .golangci.yml), and go test's own smaller set would type-check
# every dependency once more for its facts (in each build configuration), which on a
# fresh machine costs minutes. So would a go vet stage: about 120 s for the product
# alone, measured on a fresh cache here.
as_released() {
  CGO_ENABLED=0 GOFLAGS=-trimpath "$@"
}

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

# No built or bulky file is tracked: a binary belongs in _output, built by a script.
check_tracked_files() {
  local elf big
  # An ELF file starts with 0x7f "ELF" (a text file would need that at a line's start).
  elf="$(git ls-files -z | xargs -0 -r env LC_ALL=C grep -l -m1 $'^\x7fELF' -- 2>/dev/null || true)"
  big="$(git ls-files -z | xargs -0 -r stat -c '%s %n' -- 2>/dev/null | awk '$1 > 1048576 { print "  " $2 ": " $1 " bytes" }')"
  if [[ -n "${elf}${big}" ]]; then
    echo "tracked files that should not be (binaries belong in _output, files over 1 MiB nowhere):" >&2
    [[ -z "${elf}" ]] || sed 's/^/  ELF: /' <<<"${elf}" >&2
    [[ -z "${big}" ]] || echo "${big}" >&2
    return 1
  fi
}

# A module the product shares with the test module (the harness and the bench), the
# local control plane or controller-gen (client-go and all under it) must be at the
# product's version there too; another version is compiled again, which on a fresh
# machine costs minutes for nothing. (kube_codegen.sh builds the other generators in code-generator's own module,
# which this does not check; its pins match the product's at v0.37.2.)
check_module_versions() {
  local dir patterns product mismatched=0
  # What each module builds (not every module in its graph), with the version it builds
  # it at (a replaced module's too).
  local format='{{with .Module}}{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}'
  product="$(go list -deps -test -f "${format}" ./... | sort -u)" || return 1
  [[ -n "${product}" ]] || { echo "go list found nothing the product builds" >&2; return 1; }
  for dir in test test/bench/controllerruntime hack/release hack/tools hack/tools/kwok hack/tools/helm hack/tools/lint hack/tools/codegen; do
    patterns=./...
    [[ ${dir} == hack/tools* ]] && patterns=tool
    if ! (cd "${dir}" && go list -deps -test -tags e2e,faults -f "${format}" ${patterns} | sort -u) |
      awk -v dir="${dir}" 'NR == FNR { product[$1] = $2; next }
        ($1 in product) && product[$1] != "" && product[$1] != $2 { printf "%s: %s %s, the product has %s\n", dir, $1, $2, product[$1]; bad = 1 }
        END { exit bad }' <(printf '%s\n' "${product}") -; then
      mismatched=1
    fi
  done
  if [[ ${mismatched} -ne 0 ]]; then
    echo "set those modules to the product's versions (go get MODULE@VERSION in that module)" >&2
    return 1
  fi
}

# golangci-lint (hack/tools/lint, built by then) on every module of ours, with the
# suites' build tags: go vet and the linters of .golangci.yml, which find bugs, not style.
# No file is under a negated tag, so both tags at once see every file.
lint() {
  local dir
  for dir in . test test/bench/controllerruntime hack/release hack/image hack/alertcheck; do
    echo "golangci-lint: ${dir}"
    (cd "${dir}" && "${REPO_ROOT}/_output/bin/golangci-lint" run --config "${REPO_ROOT}/.golangci.yml" \
      --build-tags e2e,faults ./...) || return 1
  done
}

unit_tests() {
  # Compiled first, with no test run: on a fresh machine the race detector's build of
  # client-go would otherwise starve the Lease timings of the tests already running.
  go test -vet=off -race -count=1 -run '^$' -coverprofile=_output/unit-cover.out ./... >/dev/null
  # The slot tests wait on Lease timings, not on the CPU: more of them, and more
  # packages, at once than the two cores would give.
  go test -vet=off -race -count=1 -p 4 -parallel 8 -coverprofile=_output/unit-cover.out ./...
  # Coverage of the controller itself, the files this suite exists to prove.
  awk -F'[ :,]' 'NR > 1 && $1 ~ /\/(controller|report|present)\.go$/ { n = $(NF-1); total += n; if ($NF > 0) covered += n }
    END { printf "coverage of the controller (controller.go, report.go, present.go): %.1f%% of %d statements\n", 100 * covered / total, total }' \
    _output/unit-cover.out
}

# `make fuzz`: every fuzz target, FUZZ_TIME each. The unit tests run their seeds and
# committed inputs already; fuzzing compiles each target again with coverage
# instrumentation, which is why it is not part of the whole run. A failing input is
# written under the package's testdata/fuzz, and committing it makes it a regression test.
fuzz_tests() {
  local pkg target
  for pkg in . ./internal/reconcile; do
    for target in $(go test -list '^Fuzz' "${pkg}" | grep '^Fuzz'); do
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "${FUZZ_TIME:-10s}" "${pkg}"
    done
  done
}

# The test module's own tests, outside the suites' build tags: the local control plane's
# (one of them starts a cluster; the binaries are built by then, so it must run), the
# fault suite's API proxy, the container suite's node (how a Pod becomes an OCI runtime
# configuration), how the GitOps tools read the status the controller computes, and the
# bench's pure parts.
harness_tests() {
  (cd test && LOCALCLUSTER_REQUIRED=1 go test -vet=off -race -count=1 ./localcluster/... ./apiproxy/... ./container/node/... ./gitops/... ./bench/...)
}

image_tests() {
  (cd hack/image && go test -vet=off -count=1 ./...)
}

alertcheck_tests() {
  (cd hack/alertcheck && go test -vet=off -count=1 ./...)
}

# The chart against kustomize, with helm from hack/tools/helm (built by then).
release_tool_tests() {
  (cd hack/release && HELM="${REPO_ROOT}/_output/bin/helm" go test -vet=off -count=1 ./...)
}

# The container suite runs the image under runc, in network namespaces it makes with ip,
# and on a real node with containerd and the CNI plugins: all are installed here when
# missing, as on a fresh machine.
container_runtime() {
  local missing=()
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v containerd >/dev/null 2>&1 || missing+=(containerd)
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
  if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ "$(id -u)" -ne 0 ]]; then
      echo "the container tests need root and ${missing[*]}; install them (apt-get install ${missing[*]}) and run as root" >&2
      return 1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  runc --version | head -1
  containerd --version
}

e2e_tests() {
  local status=0
  # Every e2e test runs the controller binary taken out of the image built above, the
  # container suite the image itself, and the helm suite the release's install.yaml and
  # chart. The three suites run at once, each on a cluster of its own, and so do their
  # tests: most of their time is waiting (on Leases, rollouts, a progress deadline).
  (cd test && E2E_IMAGE_ARCHIVE="${REPO_ROOT}/_output/image/sample-controller.oci.tar" \
    E2E_RELEASE_DIR="${REPO_ROOT}/_output/release" \
    go test -vet=off -tags e2e -count=1 -timeout 30m -p 3 -parallel 8 -skip '^TestHostileCallers$' -v ./e2e/ ./helm/ ./container/) >_output/e2e.log 2>&1 || status=$?
  grep -E '^(=== RUN|--- |    --- |PASS|FAIL|ok|leader election:|helm:)|_test\.go:[0-9]+' _output/e2e.log || true
  if [[ ${status} -ne 0 ]]; then
    echo "e2e tests failed; the end of _output/e2e.log (component logs are in _output/e2e/, _output/helm/ and _output/container/):"
    tail -n 150 _output/e2e.log
  fi
  return "${status}"
}

# hostile_tests runs TestHostileCallers at issue 56's scale (random tokens for a minute,
# 2000 Foos of 200 KiB), alone: 400 MB through one API server would slow every test
# beside it.
hostile_tests() {
  local status=0
  (cd test && E2E_IMAGE_ARCHIVE="${REPO_ROOT}/_output/image/sample-controller.oci.tar" E2E_HOSTILE=full \
    go test -vet=off -tags e2e -count=1 -timeout 20m -run '^TestHostileCallers$' -v ./e2e/) >_output/hostile.log 2>&1 || status=$?
  grep -E '^(--- |PASS|FAIL|ok|e2e: hostile)|_test\.go:[0-9]+' _output/hostile.log || true
  if [[ ${status} -ne 0 ]]; then
    echo "the hostile suite failed; the end of _output/hostile.log (component logs are in _output/e2e-hostile/):"
    tail -n 150 _output/hostile.log
  fi
  return "${status}"
}

fault_tests() {
  local status=0
  # The binary of the image, as in the e2e stage. Each case runs several controllers at
  # once; they mostly wait on the apiserver, so more than one per core.
  (cd test && E2E_IMAGE_ARCHIVE="${REPO_ROOT}/_output/image/sample-controller.oci.tar" \
    go test -vet=off -tags faults -count=1 -timeout 20m -parallel 6 -v ./faults/) >_output/faults.log 2>&1 || status=$?
  grep -E '^(=== RUN|--- |    --- |PASS|FAIL|ok|faults:)|_test\.go:[0-9]+' _output/faults.log || true
  if [[ ${status} -ne 0 ]]; then
    echo "fault tests failed; the end of _output/faults.log (component logs are in _output/faults/ and _output/faults-restarts/):"
    tail -n 150 _output/faults.log
  fi
  return "${status}"
}

# The tests run the release of `make release` (the image, install.yaml, the chart),
# built for this machine only; `make release` builds every architecture.
build_release() {
  ARCHS="$(go env GOARCH)" hack/release.sh
}

# `hack/test.sh e2e` and `hack/test.sh faults` (make e2e, make test-faults) run one
# suite exactly as the whole run does: on the image's binary, with the same timeouts.
case "${1:-all}" in
  fuzz)
    stage "fuzz" fuzz_tests
    exit 0
    ;;
  e2e | faults)
    stage "build the local control plane" hack/build-tools.sh
    stage "build the release" as_released build_release
    if [[ "$1" == e2e ]]; then
      stage "container runtime" container_runtime
      stage "e2e tests" as_released e2e_tests
      stage "hostile suite, alone" as_released hostile_tests
    else
      stage "fault tests" as_released fault_tests
    fi
    exit 0
    ;;
  all) ;;
  *)
    echo "usage: hack/test.sh [e2e|faults|fuzz]" >&2
    exit 2
    ;;
esac

stage "gofmt" check_gofmt
stage "tracked files" check_tracked_files
stage "verify-codegen" as_released hack/verify-codegen.sh
stage "govulncheck" as_released hack/vulncheck.sh
stage "module versions" check_module_versions
stage "build the local control plane" hack/build-tools.sh
stage "golangci-lint" as_released lint
stage "build the release" as_released build_release
stage "image tool tests" as_released image_tests
stage "release tool tests" as_released release_tool_tests
stage "alert check tool tests" as_released alertcheck_tests
stage "unit tests (-race)" unit_tests
stage "harness tests (-race)" harness_tests
stage "container runtime" container_runtime
stage "e2e tests" as_released e2e_tests
stage "fault tests" as_released fault_tests
stage "hostile suite, alone" as_released hostile_tests
