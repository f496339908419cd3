#!/usr/bin/env bash
# Writes a release, as `make release` does, into _output/release (or RELEASE_DIR):
#
#   sample-controller.oci.tar       the image (hack/build-image.sh), for ARCHS
#                                   (default amd64 arm64)
#   install.yaml                    the CRD and the controller (with the Foo roles) in one file,
#                                   running the image by its digest
#   sample-controller-VERSION.tgz   the Helm chart (artifacts/chart), its values naming
#                                   the image by the same digest
#   SHA256SUMS                      the checksums of the three, for sha256sum -c
#
# VERSION is the release, vMAJOR.MINOR.PATCH (default hack/version.sh's, artifacts/deploy's
# tag): the version the binary reports, the chart's appVersion and, without its "v",
# the chart's version; CHANGELOG.md must have its section. IMAGE is where the image will
# be pushed, REPOSITORY:TAG (default sample-controller:VERSION), its tag VERSION. The
# digest is the archive's, and stays the image's when it is pushed as it is:
# skopeo copy --all --preserve-digests oci-archive:_output/release/sample-controller.oci.tar
# docker://REPOSITORY:TAG. Then `kubectl apply --server-side -f install.yaml`, or
# `helm install sample-controller sample-controller-VERSION.tgz -n NAMESPACE
# --create-namespace`. RELEASE_DIR is emptied first; it must be empty or a release.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
RELEASE_DIR="${RELEASE_DIR:-${REPO_ROOT}/_output/release}"
VERSION="${VERSION:-$("${REPO_ROOT}/hack/version.sh")}"
IMAGE="${IMAGE:-sample-controller:${VERSION}}"
HELM="${HELM:-${REPO_ROOT}/_output/bin/helm}"
export IMAGE VERSION

log() {
  echo "release: $*" >&2
}

if [[ "${IMAGE##*/}" != *:* || "${IMAGE}" == *@* ]]; then
  echo "release: IMAGE=${IMAGE}: want REPOSITORY:TAG" >&2
  exit 2
fi
repository="${IMAGE%:*}"
tag="${IMAGE##*:}"
if [[ ! "${VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION=${VERSION}: want vMAJOR.MINOR.PATCH" >&2
  exit 2
fi
if [[ "${tag}" != "${VERSION}" ]]; then
  echo "release: IMAGE=${IMAGE}: its tag is not VERSION=${VERSION}; one version names the image, the binary and the chart" >&2
  exit 2
fi
if ! awk -v v="${VERSION}" '$1 == "##" && $2 == v { found = 1 } END { exit !found }' "${REPO_ROOT}/CHANGELOG.md"; then
  echo "release: CHANGELOG.md has no section \"## ${VERSION}\": say what changed first" >&2
  exit 2
fi
if [[ ! -x "${HELM}" ]]; then
  log "no helm at ${HELM}: building the tools (make tools)"
  "${REPO_ROOT}/hack/build-tools.sh"
fi

if [[ -d "${RELEASE_DIR}" && -n "$(ls -A "${RELEASE_DIR}")" && ! -f "${RELEASE_DIR}/SHA256SUMS" ]]; then
  echo "release: RELEASE_DIR=${RELEASE_DIR} holds something other than a release; not emptying it" >&2
  exit 2
fi
rm -rf "${RELEASE_DIR}"
mkdir -p "${RELEASE_DIR}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

"${REPO_ROOT}/hack/build-image.sh" | tee "${work}/image.txt"
digest="$(awk '$1 == "digest:" { print $2 }' "${work}/image.txt")"
if [[ ! "${digest}" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "release: hack/build-image.sh printed no digest" >&2
  exit 1
fi
cp "${REPO_ROOT}/_output/image/sample-controller.oci.tar" "${RELEASE_DIR}/"

release() {
  (cd "${REPO_ROOT}/hack/release" && go run . "$@" --repo-root "${REPO_ROOT}")
}
release install --image "${repository}@${digest}" >"${RELEASE_DIR}/install.yaml"
release chart --image "${repository}@${digest}" --out "${work}/chart/sample-controller"
HELM_CACHE_HOME="${work}/helm" HELM_CONFIG_HOME="${work}/helm" HELM_DATA_HOME="${work}/helm" \
  "${HELM}" package "${work}/chart/sample-controller" --version "${tag#v}" --app-version "${tag}" \
  --destination "${RELEASE_DIR}" >/dev/null

(cd "${RELEASE_DIR}" && sha256sum -- * >"${work}/SHA256SUMS" && mv "${work}/SHA256SUMS" . && sha256sum --quiet -c SHA256SUMS)
log "${IMAGE} as ${repository}@${digest}, in ${RELEASE_DIR#"${REPO_ROOT}/"}:"
(cd "${RELEASE_DIR}" && ls -l) >&2
