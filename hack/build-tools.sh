#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet, kwok) from the Go modules pinned under hack/tools into
# _output/bin (or $LOCALCLUSTER_BIN_DIR). A binary is rebuilt only when it is missing or
# when the pins (go.mod/go.sum) or this script changed since it was built.
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

# fingerprint prints a hash of everything that decides what a module's binaries are.
fingerprint() {
  local module_dir=$1
  cat "${module_dir}/go.mod" "${module_dir}/go.sum" "${SCRIPT}" | sha256sum | cut -d' ' -f1
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
    log "building what is missing or out of date into ${BIN_DIR}, one binary at a time; a cold build takes 10-20 minutes on 2 cores"
  fi
}

build_one() {
  local module_dir=$1 bin=$2 pkg=$3 ldflags=$4
  local t0=${SECONDS}
  log "building ${bin} from ${pkg}"
  (cd "${module_dir}" && go build -trimpath -ldflags "${ldflags}" -o "${BIN_DIR}/${bin}.tmp" "${pkg}")
  mv -f "${BIN_DIR}/${bin}.tmp" "${BIN_DIR}/${bin}"
  log "built ${bin} in $((SECONDS - t0))s"
  built+=("${bin}")
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
for entry in "${k8s_bins[@]}"; do
  read -r bin pkg <<<"${entry}"
  if needs_build "${bin}" "${k8s_stamp}" "${k8s_want}"; then
    announce_once
    build_one "${TOOLS_DIR}" "${bin}" "${pkg}" "${version_ldflags}"
  fi
done
# Written only after every binary of the module is built, so that an interrupted build is
# redone; the Go build cache keeps the binaries that were done quick to redo.
echo "${k8s_want}" >"${k8s_stamp}"

# kwok, from its own module.
kwok_stamp="${BIN_DIR}/.kwok.stamp"
kwok_want="$(fingerprint "${KWOK_DIR}")"
if needs_build kwok "${kwok_stamp}" "${kwok_want}" || [[ ! -f "${BIN_DIR}/${KWOK_STAGES_FILE}" ]]; then
  announce_once
  kwok_version="$(cd "${KWOK_DIR}" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
  build_one "${KWOK_DIR}" kwok sigs.k8s.io/kwok/cmd/kwok \
    "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}"

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

if [[ ${#built[@]} -eq 0 ]]; then
  log "all tools in ${BIN_DIR} are up to date"
else
  log "built ${built[*]} in $((SECONDS - start))s"
fi
