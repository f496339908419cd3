#!/usr/bin/env bash
# `make vulncheck`: govulncheck (pinned in hack/tools/vuln) on the product module, against
# the Go vulnerability database at VULNDB_VERSION. Fails when the controller's code can
# reach a function with a known vulnerability, in a module or in the standard library
# of the Go that runs this.
#
# The database is golang.org/x/vulndb's own OSV entries, fetched from the Go module
# proxy like any module (and checked against the Go checksum database by the go command):
# govulncheck's default, vuln.go.dev, may be unreachable where the proxy is not.
# govulncheck reads a directory of OSV entries as a database (-db file://...).
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN_DIR="${REPO_ROOT}/_output/bin"

# The database's version: a commit of golang.org/x/vulndb as the proxy names it. The
# newest is the last line of `go list -m -versions golang.org/x/vulndb` (or of
# https://proxy.golang.org/golang.org/x/vulndb/@v/list).
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

mkdir -p "${BIN_DIR}"
(cd "${REPO_ROOT}/hack/tools/vuln" && go build -trimpath -o "${BIN_DIR}/govulncheck" golang.org/x/vuln/cmd/govulncheck)

# Outside any module, so that the product's go.mod neither lists nor resolves it.
db="$(cd / && go mod download -json "golang.org/x/vulndb@${VULNDB_VERSION}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [[ -z "${db}" || ! -d "${db}/data/osv" ]]; then
  echo "vulncheck: could not fetch golang.org/x/vulndb@${VULNDB_VERSION} from the module proxy" >&2
  exit 1
fi
echo "vulncheck: $(go version | cut -d' ' -f3), database golang.org/x/vulndb@${VULNDB_VERSION} ($(find "${db}/data/osv" -name '*.json' | wc -l) entries)"

cd "${REPO_ROOT}"
"${BIN_DIR}/govulncheck" -db "file://${db}/data/osv" ./...
