#!/usr/bin/env bash
# Installs or removes the controller in the cluster kubectl points at, as `make deploy`
# and `make undeploy` do.
#
#   hack/deploy.sh apply    the CRD (artifacts/examples), then artifacts/deploy with the
#                           image IMAGE (default sample-controller:VERSION, hack/version.sh's)
#   hack/deploy.sh delete   artifacts/deploy only: the CRD, the Foos and their
#                           Deployments stay
#   hack/deploy.sh handover gives what `apply` installed, the CRD included, to the helm
#                           release RELEASE (default sample-controller) in its namespace,
#                           sample-controller-system, so that `helm install` there
#                           adopts it: helm's ownership label and annotations on every
#                           object but the namespace, and kubectl's records of its
#                           applies removed. Nothing else changes, and nothing runs twice.
#
# `apply` refuses, before changing anything, to install over a helm release's
# controller: one install acts on Foos. `apply` without the fencing component, and
# `delete`, delete its policy and bindings, which are cluster-scoped.
#
# COMPONENTS adds kustomize components of artifacts/deploy/components, by directory
# name, separated by spaces: COMPONENTS="prometheus networkpolicy"; cert-manager goes
# last, whatever the order given.
#
# KUBECTL names the kubectl binary (default kubectl); KUBECONFIG and the rest of
# kubectl's environment apply as usual. Extra arguments go to kubectl, e.g.
# --dry-run=server (not =client: the apply is server-side). Needs nothing but kubectl: the image and the components are set by
# an overlay written to _output/deploy (or OVERLAY_DIR, a directory under the
# repository: kustomize takes only relative paths), not by `kustomize edit`.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
KUBECTL="${KUBECTL:-kubectl}"
IMAGE="${IMAGE:-sample-controller:$("${REPO_ROOT}/hack/version.sh")}"
COMPONENTS="${COMPONENTS:-}"
OVERLAY="${OVERLAY_DIR:-${REPO_ROOT}/_output/deploy}"

usage() {
  echo "usage: hack/deploy.sh apply|delete|handover [KUBECTL-ARGS...]" >&2
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
if [[ " ${COMPONENTS} " == *" fencing "* && " ${COMPONENTS} " == *" sharded "* ]]; then
  echo "hack/deploy.sh: the fencing component fences the single leader's Lease; with sharded it would refuse every write. Choose one (docs/reliability.md)." >&2
  exit 2
fi

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

# The namespace every install of artifacts/deploy goes to.
NAMESPACE=sample-controller-system

# remove_fencing deletes the fencing component's policy and bindings, which are
# cluster-scoped: an apply without the component, or an uninstall, must not leave the
# policy fencing writes on a Lease nobody will hold (in sharded mode, every write).
# Of the arguments, it passes on those that choose the cluster, and a dry run.
remove_fencing() {
  local cluster=() dry=() arg objects
  for arg in "$@"; do
    case "${arg}" in
      --context=* | --kubeconfig=* | --server=* | --cluster=* | --user=*) cluster+=("${arg}") ;;
      --dry-run*) dry+=("${arg}") ;;
    esac
  done
  objects="$("${KUBECTL}" get validatingadmissionpolicybinding,validatingadmissionpolicy "${cluster[@]}" \
    -l app.kubernetes.io/name=sample-controller --ignore-not-found -o name 2>/dev/null || true)"
  if [[ -n "${objects}" ]]; then
    # shellcheck disable=SC2086 # one name per line
    "${KUBECTL}" delete ${objects} "${cluster[@]}" "${dry[@]}" --ignore-not-found
  fi
}

case "${action}" in
  apply)
    release="$("${KUBECTL}" get clusterrole sample-controller --ignore-not-found \
      -o 'jsonpath={.metadata.annotations.meta\.helm\.sh/release-name} {.metadata.annotations.meta\.helm\.sh/release-namespace}')"
    if [[ -n "${release// /}" ]]; then
      echo "hack/deploy.sh: the controller is installed already, by the helm release ${release% *} in namespace ${release#* }; upgrade that release, or uninstall it first (helm uninstall ${release% *} -n ${release#* }: the CRD and the Foos stay)" >&2
      exit 1
    fi
    if [[ " ${COMPONENTS} " != *" fencing "* ]]; then
      remove_fencing "$@"
    fi
    # Server-side, under kubectl's own field manager, as install.yaml is applied: the two
    # are one owner of the same fields, so that either upgrades the other and a field one
    # version drops is removed. --force-conflicts: what make deploy declares wins over
    # hand edits of its objects, as a client-side apply's did.
    "${KUBECTL}" apply --server-side --force-conflicts -k "${REPO_ROOT}/artifacts/examples" "$@"
    "${KUBECTL}" apply --server-side --force-conflicts -k "${OVERLAY}" "$@"
    ;;
  delete)
    remove_fencing "$@"
    "${KUBECTL}" delete -k "${OVERLAY}" --ignore-not-found "$@"
    ;;
  handover)
    RELEASE="${RELEASE:-sample-controller}"
    # The CRD too, which the chart installs and upgrades (crds.enabled) and keeps.
    mapfile -t objects < <({ "${KUBECTL}" kustomize "${REPO_ROOT}/artifacts/examples"; echo "---"; "${KUBECTL}" kustomize "${OVERLAY}"; } |
      "${KUBECTL}" get -f - -o name | grep -v '^namespace/')
    # One patch per object, all of it or nothing: helm's ownership, and no record of
    # kubectl's applies. The last-applied annotation goes, and the managed fields
    # become one entry naming only the label, so that helm's first server-side apply
    # owns every field it sets alone: kubectl's entries would share them (and conflict
    # where a default fills an atomic field), as would "before-first-apply", which the
    # API server puts in an empty list.
    handover='{"manager":"hack/deploy.sh","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app.kubernetes.io/managed-by":{}}}}}'
    owner="{\"meta.helm.sh/release-name\":\"${RELEASE}\",\"meta.helm.sh/release-namespace\":\"${NAMESPACE}\",\"kubectl.kubernetes.io/last-applied-configuration\":null}"
    "${KUBECTL}" patch -n "${NAMESPACE}" "${objects[@]}" --type=merge "$@" \
      -p "{\"metadata\":{\"annotations\":${owner},\"labels\":{\"app.kubernetes.io/managed-by\":\"Helm\"},\"managedFields\":[${handover}]}}"
    echo "hack/deploy.sh: handed over to the helm release ${RELEASE}; now: helm install ${RELEASE} CHART -n ${NAMESPACE}, with the values of the components you deployed" >&2
    ;;
  *)
    usage
    ;;
esac
