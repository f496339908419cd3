# Run `make help` for the targets.
.DEFAULT_GOAL := help

BIN := _output/bin

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the controller binary into _output/bin.
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/sample-controller .

.PHONY: test
test: ## Run the whole test suite: gofmt, verify-codegen, go vet, unit tests with -race.
	hack/test.sh

.PHONY: update-codegen
update-codegen: ## Regenerate clients, deepcopy and the CRD from pkg/apis.
	hack/update-codegen.sh

.PHONY: verify-codegen
verify-codegen: ## Fail when generated code or the CRD is stale.
	hack/verify-codegen.sh
