#!/usr/bin/env bash
# Installs or removes the controller in the cluster kubectl points at, as `make deploy`
# and `make undeploy` do.
#
#   hack/deploy.sh apply    the CRD (artifacts/examples), then artifacts/deploy with the
#                           image IMAGE (default sample-controller:v0.1.0)
#   hack/deploy.sh delete   artifacts/deploy only: the CRD, the Foos and their
#                           Deployments stay
#
# COMPONENTS adds kustomize components of artifacts/deploy/components, by directory
# name, separated by spaces: COMPONENTS="prometheus networkpolicy"; cert-manager goes
# last, whatever the order given.
#
# KUBECTL names the kubectl binary (default kubectl); KUBECONFIG and the rest of
# kubectl's environment apply as usual. Extra arguments go to kubectl, e.g.
# --dry-run=server. Needs nothing but kubectl: the image and the components are set by
# an overlay written to _output/deploy (or OVERLAY_DIR, a directory under the
# repository: kustomize takes only relative paths), not by `kustomize edit`.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
KUBECTL="${KUBECTL:-kubectl}"
IMAGE="${IMAGE:-sample-controller:v0.1.0}"
COMPONENTS="${COMPONENTS:-}"
OVERLAY="${OVERLAY_DIR:-${REPO_ROOT}/_output/deploy}"

usage() {
  echo "usage: hack/deploy.sh apply|delete [KUBECTL-ARGS...]" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
action="$1"
shift

# The image's name and tag (or digest), split the way kustomize's images field wants.
name="${IMAGE}" tag="" digest=""
if [[ "${IMAGE}" == *@* ]]; then
  name="${IMAGE%@*}" digest="${IMAGE#*@}"
elif [[ "${IMAGE##*/}" == *:* ]]; then
  name="${IMAGE%:*}" tag="${IMAGE##*:}"
fi

mkdir -p "${OVERLAY}"
OVERLAY="$(cd "${OVERLAY}" && pwd -P)"
if [[ "${OVERLAY}" != "${REPO_ROOT}"/* ]]; then
  echo "hack/deploy.sh: OVERLAY_DIR ${OVERLAY} is not under ${REPO_ROOT}" >&2
  exit 2
fi
# The way from the overlay back up to the repository, for kustomize's relative paths.
up=""
IFS=/ read -ra parts <<<"${OVERLAY#"${REPO_ROOT}/"}"
for _ in "${parts[@]}"; do up+="../"; done

for component in ${COMPONENTS}; do
  if [[ "${component}" == */* || ! -f "${REPO_ROOT}/artifacts/deploy/components/${component}/kustomization.yaml" ]]; then
    echo "hack/deploy.sh: no component ${component}; there are:" $(ls "${REPO_ROOT}/artifacts/deploy/components") >&2
    exit 2
  fi
done

{
  echo "# Written by hack/deploy.sh for IMAGE=${IMAGE} COMPONENTS=\"${COMPONENTS}\"; do not edit."
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "resources:"
  echo "- ${up}artifacts/deploy"
  if [[ -n "${COMPONENTS// /}" ]]; then
    echo "components:"
    # cert-manager last: it patches what the others add (the ServiceMonitor).
    for component in ${COMPONENTS}; do
      [[ "${component}" == cert-manager ]] || echo "- ${up}artifacts/deploy/components/${component}"
    done
    for component in ${COMPONENTS}; do
      [[ "${component}" != cert-manager ]] || echo "- ${up}artifacts/deploy/components/${component}"
    done
  fi
  echo "images:"
  echo "- name: sample-controller"
  echo "  newName: ${name}"
  [[ -n "${tag}" ]] && echo "  newTag: ${tag}"
  [[ -n "${digest}" ]] && echo "  digest: ${digest}"
} >"${OVERLAY}/kustomization.yaml"

case "${action}" in
  apply)
    "${KUBECTL}" apply -k "${REPO_ROOT}/artifacts/examples" "$@"
    "${KUBECTL}" apply -k "${OVERLAY}" "$@"
    ;;
  delete)
    "${KUBECTL}" delete -k "${OVERLAY}" --ignore-not-found "$@"
    ;;
  *)
    usage
    ;;
esac
