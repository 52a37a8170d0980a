# fairlead — see README.md. `make run` and `make test` are all the set-up a fresh machine needs.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)

.PHONY: all build run test vet fmt bench bench-quick clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fairlead ./cmd/fairlead
	$(GO) build -o bin/fairlead-sim ./cmd/fairlead-sim

# Starts a simulated ThingWorx cluster and fairlead in front of it; Ctrl-C stops both.
run: build
	bash bench/run.sh

# Compares fairlead with HAProxy, nginx and Caddy (installed when missing) on the simulated cluster:
# Markdown on stdout, bench/results/<timestamp>.json and .svg. bench-quick: every scenario briefly.
bench: build
	bash bench/install-peers.sh
	$(GO) run ./bench/cmd/fairlead-bench -rounds 3

bench-quick: build
	bash bench/install-peers.sh
	$(GO) run ./bench/cmd/fairlead-bench -quick

# All tests under the race detector, plus the allocation guards of the hot paths, which run without it
# (the race detector allocates on its own).
test:
	$(GO) vet ./...
	$(GO) test -count=1 -run 'DoesNotAllocate' ./lb/... ./stickiness/
	$(GO) test -race -count=1 -timeout 8m ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
