# payrouter: `make help` lists the targets.
SHELL := bash
GO    ?= go
# Every go command run by make, and by the scripts and the contract suite it starts, uses this
# toolchain: the go on PATH fetches it from the Go module proxy the first time (go.mod's
# toolchain line names the same one). Standard library fixes reach the binary only through it.
export GOTOOLCHAIN := go1.27.3
BIN   := bin

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# What `payrouter version` says of a build (internal/buildinfo): the commit from git, and the
# version from a v* tag when there is one (else the module's own, "(devel)" from a checkout).
# Stamped with the linker because go build records no commit with -buildvcs=false, nor in a
# copy of the sources without .git.
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null)
MODIFIED ?= $(shell git diff --quiet HEAD -- 2>/dev/null || echo true)
BUILDINFO := github.com/payrouter/payrouter/internal/buildinfo
LDFLAGS  := -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).modified=$(MODIFIED)

.PHONY: build
build: ## build bin/payrouter and bin/gatewaysim
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/payrouter ./cmd/payrouter
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/gatewaysim ./cmd/gatewaysim

# make image: payrouter's container image (Dockerfile) and the simulators', tagged IMAGE:TAG and
# IMAGE-gatewaysim:TAG (TAG: the version, else the commit) and :latest. IMAGE_BUILDER runs the
# Dockerfile: buildah, podman or docker (with options: "buildah --storage-driver vfs").
IMAGE         ?= localhost/payrouter
IMAGE_BUILDER ?= buildah
# make package: the helm release built from the Go module proxy to lint and render the chart.
HELM_VERSION  ?= v3.22.0
PACKAGE_ENV = GO='$(GO)' LDFLAGS='$(LDFLAGS)' VERSION='$(VERSION)' COMMIT='$(COMMIT)' MODIFIED='$(MODIFIED)'

.PHONY: image
image: ## the container images (FROM scratch: the static binary, the CA bundle, configs/; uid 65532), localhost/payrouter and localhost/payrouter-gatewaysim, with IMAGE_BUILDER (buildah; podman or docker work too): docs/deploy.md
	$(PACKAGE_ENV) IMAGE='$(IMAGE)' IMAGE_BUILDER='$(IMAGE_BUILDER)' bash scripts/build-image.sh

.PHONY: package
package: ## build the images in a throwaway buildah store and check them (payrouter version, check and serve run inside; user, files), deploy/compose.yaml, and the Helm chart (helm lint, helm template and what it renders)
	$(PACKAGE_ENV) HELM_VERSION=$(HELM_VERSION) bash scripts/check-package.sh

.PHONY: run
run: build ## start the simulated gateways and payrouter on configs/payrouter.yaml (Ctrl-C stops both)
	@bash scripts/run-demo.sh

.PHONY: run-fleet
run-fleet: build ## start PostgreSQL (temp dir), redis-server, the simulated gateways and two payrouter instances sharing both (configs/payrouter-redis.yaml)
	@bash scripts/run-fleet.sh

.PHONY: test
test: ## (scripts/test.sh: independent steps side by side, the time of each printed) go vet, govulncheck (make vulncheck), the alert rules' promtool tests, the API spec's lint and generated clients (make api-clients), every Go test with -race (unit, conformance, stores on a real PostgreSQL and Redis, e2e, the dashboard check), the packaging checks (make package), every fuzz target for FUZZTIME, then the contract suite: core in memory, all of it on PostgreSQL and Redis
	GO='$(GO)' MAKE='$(MAKE)' PAYROUTER_CONTRACT_SUITE=$(abspath $(CONTRACT_SUITE)) bash scripts/test.sh

# scripts/vulncheck.sh pins govulncheck and the golang.org/x/vulndb version it builds its database
# from, and keeps both under VULNCHECK_CACHE (default ~/.cache/payrouter/vulncheck).
.PHONY: vulncheck
vulncheck: ## govulncheck with this toolchain against the Go vulnerability database (built from the golang.org/x/vulndb module): fails on any vulnerability reachable from payrouter's code
	GO=$(GO) bash scripts/vulncheck.sh

# Every func FuzzX in a _test.go file, run alone for FUZZTIME (scripts/fuzz-short.sh). A failing
# input is written to the package's testdata/fuzz/FuzzX/ by go test: commit it, so that every
# later `go test` runs it as a seed.
FUZZTIME ?= 10s

.PHONY: fuzz-short
fuzz-short: ## run every fuzz target for FUZZTIME each (default 10s); failing inputs land in testdata/fuzz and are kept
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash scripts/fuzz-short.sh

.PHONY: alerts
alerts: ## promtool check rules and the alert rules' unit tests (configs/prometheus)
	bash scripts/check-alerts.sh

# The black-box contract suite is not part of this repository: it lives beside the checkout, in
# ../shared/contract (CONTRACT_SUITE=DIR points elsewhere). Where it is absent, `make contract`
# (and so `make test`) says where it looked and skips it. The reference it checks is in docs/.
CONTRACT_SUITE ?= ../shared/contract

.PHONY: api-clients
api-clients: ## api/openapi.yaml: Redocly's recommended lint (redocly.yaml), then a Go (oapi-codegen) and a TypeScript (openapi-typescript) client generated and compiled; needs Node.js, npm and the registries
	bash scripts/check-api-clients.sh

.PHONY: contract
contract: ## only the black-box contract suite (beside the checkout, CONTRACT_SUITE): core in memory, then core and fleet on PostgreSQL and Redis
	@if [[ ! -f $(CONTRACT_SUITE)/run.sh ]]; then \
		echo "make contract: skipped. The black-box contract suite is not part of this repository; it is expected beside the checkout, at $(abspath $(CONTRACT_SUITE))/run.sh, and is not there. Set CONTRACT_SUITE=DIR to run one kept elsewhere."; \
		exit 0; \
	fi; \
	set -e; \
	bash $(CONTRACT_SUITE)/run.sh core; \
	CONTRACT_DATABASE=yes bash $(CONTRACT_SUITE)/run.sh all

.PHONY: chaos
chaos: ## the chaos money check, long: 5000 charges and refunds (some racing through both instances) through two instances on PostgreSQL and Redis while gateways, a proxy, the instances (one stopped 40 s mid-refund), Redis and PostgreSQL fail on a seeded schedule (CHAOS_SEED repeats one); every ledger must balance
	CHAOS_CHARGES=5000 $(GO) test -race -count=1 -run TestChaosMoney -v -timeout 20m ./e2e/

# resilience's TestBenchBreakerOnRedis runs BenchmarkDistributedGobreaker and BenchmarkGuardWithFleet
# itself, alternately, and prints their ratio: -skip keeps -bench from running them a second time.
.PHONY: bench
# The fast-fail benchmark adds a row at 20 connections with wrk when it is installed (Debian:
# apt-get install wrk) and says it skipped it otherwise. Each measurement with a goal prints a
# "goal" line: the goal beside what was measured. The scale benchmark fills PostgreSQL with
# PAYROUTER_BENCH_ROWS charges and as many events (default 10000000: about 5 minutes and 17 GB of
# disk while it runs) and a memstore with PAYROUTER_BENCH_MEMSTORE_CHARGES (default 1000000); set
# them lower for a quick run (the table says which sizes it measured).
bench: ## benchmarks (ratios, one run), each with its goal when it has one: fast-fail (and with wrk at 20 connections), healthy path, database store vs memory (healthy and fast-fail), database statements per charge, replay, decline, refund and fast-fail, breaker agreement across instances, hedging on a heavy-tailed gateway, cost as routes, gateways and stored charges grow, two instances against one, the guard, one charge in process (allocations), our Redis breaker vs gobreaker's distributed one
	PAYROUTER_BENCH=1 $(GO) test -count=1 -run '^TestBench' -v -timeout 30m ./bench/
	PAYROUTER_BENCH=1 $(GO) test -count=1 -run '^TestBench' -v -bench . -skip '^Benchmark(DistributedGobreaker|GuardWithFleet)$$' -benchmem -timeout 10m ./resilience/
	PAYROUTER_BENCH=1 $(GO) test -count=1 -run '^TestBenchChargeGoals$$' -v -bench '^BenchmarkCharge' -benchmem -timeout 5m ./httpapi/

.PHONY: lint
lint: ## gofmt and go vet (and staticcheck when installed)
	@out=$$(gofmt -l .); if [[ -n $$out ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; else echo "staticcheck not installed (go install honnef.co/go/tools/cmd/staticcheck@latest): skipped"; fi

.PHONY: clean
clean: ## remove bin/ (the binaries, bin/image/ and the helm of bin/tools/)
	rm -rf $(BIN)
