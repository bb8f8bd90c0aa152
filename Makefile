# timeout-tracer. `make help` lists the targets.
SHELL     := /bin/bash
GO        ?= go
CLANG     ?= clang-19
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
GENERATED := collector/*/*_bpfel.go collector/*/*_bpfel.o
# Lab tests (root, kernel, network namespaces, cgroups) run only with
# TT_LAB=1 (lab/testenv); `make unit` and a plain `go test ./...` skip them.
# -p 1: one package at a time. Root tests pin CPU hogs (run-queue, throttling,
# storms) and lab tests time requests: run side by side, one package's hogs
# starve another's lab client, which the tracer then rightly reports as
# runqueue_delay instead of the scenario's class (seen in CI).
TESTFLAGS ?= -count=1 -timeout 45m -p 1

deps: ## install build and test dependencies (Debian, as root)
	.ci/deps

.PHONY: help deps build build-arm64 image image-ref generate generate-check lint unit test test-unprivileged bench fuzz accuracy kmatrix e2e-k8s clean

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## bin/tracer for this machine (no clang needed: BPF objects are committed)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/tracer ./cmd/tracer

build-arm64: ## bin/tracer-arm64
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/tracer-arm64 ./cmd/tracer

# No registry, no container engine: tools/imagebuild compiles the static
# tracer for each platform and writes an OCI layout tar whose image name is
# the one deploy/daemonset.yaml runs. Same commit, same Go: same bytes
# (times from the commit, or SOURCE_DATE_EPOCH). Load it into a node's
# containerd with `ctr -n k8s.io images import bin/tracer-image.tar`.
image: ## bin/tracer-image.tar: OCI image (amd64 + arm64) named as in deploy/daemonset.yaml, reproducible
	$(GO) run ./tools/imagebuild -o bin/tracer-image.tar

image-ref: ## print the image name make image gives (deploy/daemonset.yaml's)
	@$(GO) run ./tools/imagebuild -print-ref

# clang 19's BTF type order depends on the length of the source's path (hash
# order of its allocations): the same sources give different objects in
# /work/main and in a CI clone elsewhere. So objects are generated at a
# fixed path, a bind mount of the checkout (root; else in place, with a note),
# one checkout at a time (flock): worktrees share the path.
GEN_DIR   := /tmp/ttgen

generate: ## regenerate BPF objects with $(CLANG) (amd64 + arm64), at a fixed path
	@if [ "$$(id -u)" = 0 ] && mkdir -p $(GEN_DIR); then \
		flock $(GEN_DIR).lock sh -c 'if mount --bind $(CURDIR) $(GEN_DIR) 2>/dev/null; then (cd $(GEN_DIR) && $(GO) generate ./collector/...); rc=$$?; umount $(GEN_DIR); exit $$rc; else echo "note: cannot bind-mount at $(GEN_DIR): generating in place"; $(GO) generate ./collector/...; fi'; \
	else \
		echo "note: not root: generating in place; objects may differ from the committed ones in BTF order only"; \
		$(GO) generate ./collector/...; \
	fi

generate-check: generate ## fail if the committed BPF objects are stale
	@if ! git diff --quiet -- $(GENERATED) || [ -n "$$(git ls-files --others --exclude-standard -- collector)" ]; then \
		git status --short -- collector; \
		echo "generated BPF objects are stale: run 'make generate' and commit them" >&2; exit 1; \
	fi

# gobin's struct layouts (docs/layouts.md): regenerated into a temporary
# directory from the generate sections of the committed files, then compared.
# Each probe's result is cached by a key of all its inputs
# (~/.cache/timeout-tracer/layouts), so only a changed input builds.
.PHONY: layouts-check
layouts-check: ## fail if gobin/layouts/*.json differ from a regeneration (go generate ./gobin)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd gobin && \
	$(GO) run ./internal/genlayouts -out "$$tmp" && \
	if ! diff -ru -x probes layouts "$$tmp"; then echo "gobin/layouts are stale: run 'go generate ./gobin' and commit them" >&2; exit 1; fi

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit: ## the hermetic unit tests, packages in parallel (any user; lab tests skip)
	$(GO) test -count=1 ./...

test: build ## every test: unit tests, and as root the kernel and fault-lab tests (TT_LAB=1)
	TT_LAB=1 $(GO) test $(TESTFLAGS) ./...

test-unprivileged: ## the unit tests as user nobody: root-only tests must skip with a reason
	@rm -rf /tmp/tt-unpriv && mkdir -p /tmp/tt-unpriv/bin && chmod -R 777 /tmp/tt-unpriv
	$(GO) build -o /tmp/tt-unpriv/bin/tracer ./cmd/tracer
	for p in tcpclient tcpsink deadlines httpload labapp ctxstorm; do $(GO) build -o /tmp/tt-unpriv/bin/$$p ./lab/testprog/$$p; done
	@set -eo pipefail; for pkg in $$($(GO) list -f '{{if .TestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		dir=$$($(GO) list -f '{{.Dir}}' $$pkg); bin=/tmp/tt-unpriv/$$(basename $$pkg).test; \
		$(GO) test -c -o $$bin $$pkg; chmod 755 $$bin; \
		echo "--- $$pkg (as nobody)"; \
		(cd $$dir && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
			env HOME=/tmp/tt-unpriv TT_LAB=1 TT_TEST_BIN_DIR=/tmp/tt-unpriv/bin $$bin -test.count=1 -test.v 2>&1 \
			| grep -E '^(--- SKIP|--- FAIL|ok|FAIL|PASS|panic)|^ +[a-z_]+_test\.go:[0-9]+: ' ); \
	done

bench: build ## overhead and storm benchmarks (root): prints ratios; correlator throughput; OTLP export throughput and memory; analysis time of an executable
	TT_LAB=1 $(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./bench/... ./export/
	$(GO) test -run '^$$' -bench '^BenchmarkCorrelator' -benchtime 2x -count 1 -benchmem ./correlate/
	$(GO) test -run '^$$' -bench '^BenchmarkAnalysis$$' -benchtime 5x -count 1 -benchmem ./collector/goprobe/

accuracy: build ## the accuracy matrix of the correlator in the fault lab, and the real-program suite (root): prints a table per scenario, per program x fault
	TT_LAB=1 $(GO) test -count=1 -run '^(TestAccuracyMatrix|TestRealPrograms)$$' -v -timeout 30m ./cmd/tracer -args -accuracy.n=$${ACCURACY_N:-40}

kmatrix: ## boot Debian's kernels (6.1, 6.12; amd64, arm64) under qemu + the host: check × kernel table (root)
	$(GO) run ./lab/kmatrix $(KMATRIXFLAGS)

e2e-k8s: ## the node agent in a real one-node Kubernetes cluster, offline (root): builds k8s once, ~2 min warm
	lab/k8s/e2e.sh

fuzz: ## run each fuzzer for FUZZTIME (default 60s)
	FUZZTIME=$${FUZZTIME:-60s} .ci/fuzz

clean:
	rm -rf bin
