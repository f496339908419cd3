# Run `make help` for the targets.
.DEFAULT_GOAL := help

BIN := _output/bin

# Every go command here runs the Go that go.mod's toolchain line names, whatever Go is
# installed (the go command downloads it once); `make GOTOOLCHAIN=local ...` overrides.
export GOTOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: ## Run the controller: against KUBECONFIG if set, else on a local control plane it builds and starts. Controller flags: ARGS='...'.
	cd test && go run ./cmd/run-local -- $(ARGS)

.PHONY: deploy
deploy: ## Install the CRD and the controller in kubectl's cluster, running IMAGE (default sample-controller:VERSION, hack/version.sh), with COMPONENTS="prometheus networkpolicy" if wanted.
	hack/deploy.sh apply

.PHONY: undeploy
undeploy: ## Remove the controller from kubectl's cluster; the CRD, the Foos and their Deployments stay.
	hack/deploy.sh delete

.PHONY: test
test: ## Run the whole test suite: checks, unit tests with -race, e2e tests on a local control plane.
	hack/test.sh

.PHONY: build
build: ## Build the controller binary into _output/bin (hack/build.sh: static, stamped with VERSION and the commit).
	hack/build.sh $(BIN)/sample-controller

.PHONY: image
image: ## Build the container image as an OCI archive in _output/image, without Docker.
	hack/build-image.sh

.PHONY: release
release: ## Write a release into _output/release: the image (amd64, arm64), install.yaml and the Helm chart, both naming the image by digest, and SHA256SUMS. VERSION=vX.Y.Z (default hack/version.sh) versions all of it; IMAGE=REPOSITORY:VERSION names it.
	hack/release.sh

.PHONY: tools
tools: ## Build the local control plane (etcd, kube-apiserver, ..., kwok) into _output/bin.
	hack/build-tools.sh

.PHONY: fuzz
fuzz: ## Fuzz every target for FUZZ_TIME (default 10s) each; make test runs their seeds only.
	hack/test.sh fuzz

.PHONY: e2e
e2e: ## Run only the e2e tests, as make test does (on the image's binary).
	hack/test.sh e2e

.PHONY: test-faults
test-faults: ## Run only the fault tests, as make test does: crash points, a fighting actor, leader failover, control-plane restarts (see test/faults).
	hack/test.sh faults

.PHONY: vulncheck
vulncheck: ## Check the controller's code for known vulnerabilities it can reach (govulncheck, database from the Go module proxy); make test runs it too.
	hack/vulncheck.sh

.PHONY: bench
bench: tools ## Measure cold start, requests, steady state, memory and reaction latency on a local control plane, ours beside its peers (BENCH_ARGS='...').
	cd test && go run ./bench --docs=../docs/performance.md $(BENCH_ARGS)

.PHONY: update-codegen
update-codegen: ## Regenerate clients, deepcopy and the CRD from pkg/apis.
	hack/update-codegen.sh

.PHONY: verify-codegen
verify-codegen: ## Fail when generated code or the CRD is stale.
	hack/verify-codegen.sh
