# Ferry's developer entry points. Every module of go.work is a target of
# test, vet, fmt and tidy: they loop over `go list -m`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

# The mains built by `make build`: every service's and the ferry CLI.
MAINS := $(sort $(dir $(wildcard services/*/cmd/*/main.go))) cmd/ferry/

.PHONY: dev test bench build fmt vet tidy

## dev: install missing dependencies, then run the whole stack in one process
dev:
	scripts/install-deps.sh
	$(GO) run ./cmd/ferry dev

## test: gofmt, vet and go test -race every module against real servers
##       (narrow with MODULES=platform TEST_RUN=regex)
test:
	scripts/test.sh

## bench: the workloads of docs/benchmark.md against a fresh `ferry dev` (narrow with
##        BENCH_FLAGS='-quick' or '-workloads latency,retry'), then River and
##        Asynq through ../shared/peers when present (BENCH_FLAGS=-peers=- to
##        skip), and one table of Ferry beside them; results are appended to
##        bench/results/, see docs/performance.md
bench:
	scripts/install-deps.sh
	$(GO) run ./bench $(BENCH_FLAGS)

## build: build every service main and the ferry CLI into ./bin
build:
	@mkdir -p bin
	@for d in $(MAINS); do \
		d=$${d%/}; n=$$(basename "$$d"); \
		echo "go build -o bin/$$n ./$$d"; \
		$(GO) build -o "bin/$$n" "./$$d"; \
	done

## fmt: gofmt every module
fmt:
	gofmt -l -w $$($(GO) list -m -f '{{.Dir}}')

## vet: go vet every module, reporting all that fail
vet:
	@failed=(); \
	for d in $$($(GO) list -m -f '{{.Dir}}'); do \
		(cd "$$d" && $(GO) vet ./...) || failed+=("$${d#$(CURDIR)/}"); \
	done; \
	if (( $${#failed[@]} )); then echo "go vet failed in: $${failed[*]}" >&2; exit 1; fi

## tidy: go mod tidy every module
tidy:
	@for d in $$($(GO) list -m -f '{{.Dir}}'); do \
		echo "go mod tidy in $${d#$(CURDIR)/}"; \
		(cd "$$d" && $(GO) mod tidy); \
	done
