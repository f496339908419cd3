#!/usr/bin/env bash
# Fails, showing a diff, when anything hack/update-codegen.sh generates is stale:
# deepcopy functions, pkg/generated, the CRD, or the Helm chart. It regenerates into a temporary
# copy of the tree, so the working tree is never modified.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

# Copy the tree without build output, VCS data or local state; keep the generator
# binaries so a warm run does not rebuild them.
tar -C "${REPO_ROOT}" --exclude=./.git --exclude=./_output/bin --exclude=./_output/local \
  --exclude=./_output/e2e --exclude=./_output/faults --exclude=./_output/container --exclude=./_output/image -cf - . | tar -C "${tmp}" -xf -

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
echo "Generated code is up to date."
