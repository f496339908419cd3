#!/usr/bin/env bash
# Fails, showing a diff, when anything hack/update-codegen.sh generates is stale:
# deepcopy functions, pkg/generated, the CRD, or the Helm chart. It regenerates into a temporary
# copy of the tree, so the working tree is never modified.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${REPO_ROOT}"

# Everything the generators read or write: the API types, the outputs, what the chart
# is made from and by, the generators' pins, the scripts, and Go's version. When none
# of it changed since the last verification passed, its answer stands; a verification
# that fails records nothing. VERIFY_CODEGEN_FORCE=1 verifies anyway.
STAMP="${REPO_ROOT}/_output/verify-codegen.passed"
inputs() {
  go version
  git ls-files -z --cached --others --exclude-standard -- pkg/apis pkg/generated artifacts hack/release \
    hack/tools/codegen hack/boilerplate.go.txt hack/update-codegen.sh hack/verify-codegen.sh go.mod go.sum |
    sort -z | xargs -0 -r sha256sum --
}
fingerprint="$(inputs | sha256sum | cut -d' ' -f1)"
if [[ "${VERIFY_CODEGEN_FORCE:-}" != 1 && -f "${STAMP}" && "$(cat "${STAMP}")" == "${fingerprint}" ]]; then
  echo "Generated code is up to date: nothing it is made from changed since it was last verified (${STAMP})."
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

# Copy the tree without VCS data or build output (binaries, images, logs, clusters'
# data, which a suite may be writing meanwhile); keep the generator binaries so that a
# warm run does not rebuild them.
tar -C "${REPO_ROOT}" --exclude=./.git --exclude=./_output -cf - . | tar -C "${tmp}" -xf -
if [[ -d "${REPO_ROOT}/_output/codegen-bin" ]]; then
  mkdir -p "${tmp}/_output"
  cp -a "${REPO_ROOT}/_output/codegen-bin" "${tmp}/_output/"
fi

"${tmp}/hack/update-codegen.sh" >/dev/null

status=0
for path in pkg/apis pkg/generated artifacts/examples/crd.yaml artifacts/chart; do
  if ! diff -Naupr "${REPO_ROOT}/${path}" "${tmp}/${path}"; then
    status=1
  fi
done
if [[ ${status} -ne 0 ]]; then
  echo "Generated code is out of date. Run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
mkdir -p "${REPO_ROOT}/_output"
echo "${fingerprint}" >"${STAMP}"
echo "Generated code is up to date."
