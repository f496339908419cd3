#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet, kwok), helm and golangci-lint from the Go modules
# pinned under hack/tools into _output/bin (or $LOCALCLUSTER_BIN_DIR). A binary is
# rebuilt only when it is missing or when the pins (go.mod/go.sum), this script or the Go
# version changed since it was built.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${REPO_ROOT}/hack/tools"
KWOK_DIR="${TOOLS_DIR}/kwok"
BIN_DIR="${LOCALCLUSTER_BIN_DIR:-${REPO_ROOT}/_output/bin}"
SCRIPT="${REPO_ROOT}/hack/build-tools.sh"

# The stages kwok plays to move simulated nodes and pods along; concatenated from the
# kwok module into one config file next to the binary.
KWOK_STAGES=(node/fast node/heartbeat pod/fast)
KWOK_STAGES_FILE="kwok-stages.yaml"

start=${SECONDS}
built=()

log() {
  echo "build-tools: $*" >&2
}

# fingerprint prints a hash of everything that decides what a module's binaries are: its
# pins, this script and the Go that compiles them.
fingerprint() {
  local module_dir=$1
  { cat "${module_dir}/go.mod" "${module_dir}/go.sum" "${SCRIPT}"; go env GOVERSION; } | sha256sum | cut -d' ' -f1
}

# needs_build succeeds when bin is missing or was built from other pins.
needs_build() {
  local bin=$1 stamp=$2 want=$3
  [[ ! -x "${BIN_DIR}/${bin}" ]] && return 0
  [[ ! -f "${stamp}" ]] && return 0
  [[ "$(cat "${stamp}")" != "${want}" ]]
}

announce_once() {
  if [[ ${#built[@]} -eq 0 ]]; then
    log "building what is missing or out of date into ${BIN_DIR}; a cold build takes 10-20 minutes on 2 cores"
  fi
}

# build builds the packages of one module (entries of "binary package") in one go build,
# so that what they share is compiled once and each link runs beside other compiles,
# and moves each into BIN_DIR under its name. It builds as hack/build.sh builds the
# controller (no cgo, -trimpath), as Kubernetes releases its server binaries: with the
# modules at the product's versions (make test checks that), client-go and everything
# under it are compiled once for the controller, its tests and the control plane.
build() {
  local module_dir=$1 ldflags=$2
  shift 2
  local t0=${SECONDS} entry bin pkg name tmp pkgs=() bins=()
  for entry in "$@"; do
    read -r bin pkg <<<"${entry}"
    bins+=("${bin}")
    pkgs+=("${pkg}")
  done
  log "building ${bins[*]}"
  tmp="$(mktemp -d "${BIN_DIR}/.build.XXXXXX")"
  (cd "${module_dir}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${tmp}/" "${pkgs[@]}")
  for entry in "$@"; do
    read -r bin pkg <<<"${entry}"
    # go build names a binary after the package path's last element, or the one before
    # a major version suffix (go.etcd.io/etcd/server/v3 is "server").
    name="${pkg##*/}"
    if [[ "${name}" =~ ^v[0-9]+$ ]]; then
      name="${pkg%/*}"
      name="${name##*/}"
    fi
    mv -f "${tmp}/${name}" "${BIN_DIR}/${bin}"
  done
  rmdir "${tmp}"
  log "built ${bins[*]} in $((SECONDS - t0))s"
  built+=("${bins[@]}")
}

mkdir -p "${BIN_DIR}"

# Kubernetes components and etcd.
k8s_stamp="${BIN_DIR}/.k8s-tools.stamp"
k8s_want="$(fingerprint "${TOOLS_DIR}")"
k8s_version="$(cd "${TOOLS_DIR}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
if [[ ! "${k8s_version}" =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
  log "cannot parse the k8s.io/kubernetes version '${k8s_version}' from ${TOOLS_DIR}/go.mod"
  exit 1
fi
k8s_major=${BASH_REMATCH[1]}
k8s_minor=${BASH_REMATCH[2]}
# Without these the binaries report v0.0.0-master, and kubectl warns about skew.
version_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_ldflags+=" -X ${pkg}.gitVersion=${k8s_version}"
  version_ldflags+=" -X ${pkg}.gitMajor=${k8s_major}"
  version_ldflags+=" -X ${pkg}.gitMinor=${k8s_minor}"
  version_ldflags+=" -X ${pkg}.gitTreeState=clean"
done

k8s_bins=(
  "etcd go.etcd.io/etcd/server/v3"
  "kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler"
  "kubectl k8s.io/kubernetes/cmd/kubectl"
  "kubelet k8s.io/kubernetes/cmd/kubelet"
)
k8s_missing=()
for entry in "${k8s_bins[@]}"; do
  read -r bin pkg <<<"${entry}"
  if needs_build "${bin}" "${k8s_stamp}" "${k8s_want}"; then
    k8s_missing+=("${entry}")
  fi
done
if [[ ${#k8s_missing[@]} -gt 0 ]]; then
  announce_once
  build "${TOOLS_DIR}" "${version_ldflags}" "${k8s_missing[@]}"
fi
# Written only after every binary of the module is built, so that an interrupted build is
# redone; the Go build cache keeps the binaries that were done quick to redo.
echo "${k8s_want}" >"${k8s_stamp}"

# kwok, from its own module.
kwok_stamp="${BIN_DIR}/.kwok.stamp"
kwok_want="$(fingerprint "${KWOK_DIR}")"
if needs_build kwok "${kwok_stamp}" "${kwok_want}" || [[ ! -f "${BIN_DIR}/${KWOK_STAGES_FILE}" ]]; then
  announce_once
  kwok_version="$(cd "${KWOK_DIR}" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
  build "${KWOK_DIR}" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}" \
    "kwok sigs.k8s.io/kwok/cmd/kwok"

  kwok_src="$(cd "${KWOK_DIR}" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  stages_tmp="${BIN_DIR}/${KWOK_STAGES_FILE}.tmp"
  : >"${stages_tmp}"
  for stage in "${KWOK_STAGES[@]}"; do
    for f in "${kwok_src}/kustomize/stage/${stage}"/*.yaml; do
      [[ "$(basename "${f}")" == kustomization.yaml ]] && continue
      printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s/%s\n' \
        "${kwok_version}" "${stage}" "$(basename "${f}")" >>"${stages_tmp}"
      cat "${f}" >>"${stages_tmp}"
    done
  done
  mv -f "${stages_tmp}" "${BIN_DIR}/${KWOK_STAGES_FILE}"
  log "wrote ${BIN_DIR}/${KWOK_STAGES_FILE} (stages: ${KWOK_STAGES[*]})"
  echo "${kwok_want}" >"${kwok_stamp}"
fi

# helm, from its own module, for the chart's checks and the helm e2e suite.
HELM_DIR="${TOOLS_DIR}/helm"
helm_stamp="${BIN_DIR}/.helm.stamp"
helm_want="$(fingerprint "${HELM_DIR}")"
if needs_build helm "${helm_stamp}" "${helm_want}"; then
  announce_once
  helm_version="$(cd "${HELM_DIR}" && go list -m -f '{{.Version}}' helm.sh/helm/v4)"
  build "${HELM_DIR}" "-s -w -X helm.sh/helm/v4/internal/version.version=${helm_version}" \
    "helm helm.sh/helm/v4/cmd/helm"
  echo "${helm_want}" >"${helm_stamp}"
fi

# golangci-lint, from its own module, for make test's lint stage.
LINT_DIR="${TOOLS_DIR}/lint"
lint_stamp="${BIN_DIR}/.golangci-lint.stamp"
lint_want="$(fingerprint "${LINT_DIR}")"
if needs_build golangci-lint "${lint_stamp}" "${lint_want}"; then
  announce_once
  lint_version="$(cd "${LINT_DIR}" && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)"
  build "${LINT_DIR}" "-s -w -X main.version=${lint_version#v}" \
    "golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
  echo "${lint_want}" >"${lint_stamp}"
fi

if [[ ${#built[@]} -eq 0 ]]; then
  log "all tools in ${BIN_DIR} are up to date"
else
  log "built ${built[*]} in $((SECONDS - start))s"
fi
