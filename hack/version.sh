#!/usr/bin/env bash
# Prints the version this tree releases, vMAJOR.MINOR.PATCH: the image tag that
# artifacts/deploy runs, the one place it is written. make release, make image and make
# deploy default to it; the chart's version and appVersion, the binary's --version and
# CHANGELOG.md's latest section carry it (hack/release and the helm suite check them).
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
version="$(awk '$1 == "newTag:" { print $2 }' "${REPO_ROOT}/artifacts/deploy/kustomization.yaml")"
if [[ ! "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "hack/version.sh: artifacts/deploy/kustomization.yaml's newTag is \"${version}\", want one vMAJOR.MINOR.PATCH" >&2
  exit 1
fi
echo "${version}"
