#!/usr/bin/env bash
# Builds the controller's container image without a container engine: a static binary,
# packed by the tool in hack/image into an OCI archive that `podman load -i` and
# `skopeo copy oci-archive:...` read. The Dockerfile builds the same binary, user and
# entrypoint on distroless for people with Docker. Prints the image digest and the
# archive's size.
#
# IMAGE names the image in the archive (default sample-controller:VERSION, hack/version.sh's), and its
# tag is the version the binary reports unless VERSION says otherwise. ARCHS lists the
# architectures (default "amd64 arm64": an image index with one image each; one
# architecture gives a plain image). SOURCE_DATE_EPOCH, when set, is the image's
# creation time; by default it is the commit's.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
OUT_DIR="${REPO_ROOT}/_output/image"
TOOL="${REPO_ROOT}/_output/bin/image"
IMAGE="${IMAGE:-sample-controller:$("${REPO_ROOT}/hack/version.sh")}"
ARCHS="${ARCHS:-amd64 arm64}"
# The release the binary reports (--version, sample_controller_build_info): the image's tag.
VERSION="${VERSION:-${IMAGE##*:}}"
# The commit, with -dirty for uncommitted changes; "unknown" outside git.
if REVISION="$(git -C "${REPO_ROOT}" rev-parse HEAD 2>/dev/null)"; then
  git -C "${REPO_ROOT}" diff --quiet HEAD -- 2>/dev/null || REVISION+="-dirty"
else
  REVISION=unknown
fi
# The image's creation time is the commit's, so that it means something and the same
# commit still gives the same digest.
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]] && commit_time="$(git -C "${REPO_ROOT}" log -1 --format=%ct 2>/dev/null)"; then
  export SOURCE_DATE_EPOCH="${commit_time}"
fi
ARCHIVE="${OUT_DIR}/sample-controller.oci.tar"

log() {
  echo "build-image: $*" >&2
}

mkdir -p "${OUT_DIR}" "$(dirname "${TOOL}")"

binary_args=()
for arch in ${ARCHS}; do
  log "building the controller for linux/${arch}"
  # The one build (hack/build.sh): static, without this machine's paths, so that the
  # image digest depends on the source only.
  binary="${OUT_DIR}/sample-controller-linux-${arch}"
  GOOS=linux GOARCH="${arch}" VERSION="${VERSION}" REVISION="${REVISION}" "${REPO_ROOT}/hack/build.sh" "${binary}"
  binary_args+=(--binary "${binary}")
done

# The tool runs here, so it is built for this machine whatever ARCHS says; go build
# leaves it alone when nothing changed.
(cd "${REPO_ROOT}/hack/image" && GOOS="$(go env GOHOSTOS)" GOARCH="$(go env GOHOSTARCH)" \
  go build -trimpath -o "${TOOL}" .)

log "packing ${ARCHIVE#"${REPO_ROOT}/"}"
digest="$("${TOOL}" build "${binary_args[@]}" --output "${ARCHIVE}" --tag "${IMAGE}" \
  --version "${VERSION}" --revision "${REVISION}")"
size="$(wc -c <"${ARCHIVE}" | tr -d ' ')"

echo "image:   ${IMAGE} (linux/${ARCHS// /, linux/})"
echo "digest:  ${digest}"
echo "archive: ${ARCHIVE} ($(awk -v b="${size}" 'BEGIN { printf "%.1f MiB, %d bytes", b / 1048576, b }'))"
echo "load it: podman load -i ${ARCHIVE}  or  skopeo copy --all oci-archive:${ARCHIVE} docker://REGISTRY/IMAGE:TAG"
