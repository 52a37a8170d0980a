# fairlead — see README.md. `make run` and `make test` are all the set-up a fresh machine needs.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)

.PHONY: all build install run test vet deadcode fmt bench bench-quick bench-2core clean fuzz soak faults reference cross cross-build platform-tests

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fairlead ./cmd/fairlead
	$(GO) build -o bin/fairlead-sim ./cmd/fairlead-sim

# Installs bin/fairlead into $(DESTDIR)$(PREFIX)/bin, the shipped config into $(SYSCONFDIR)/fairlead and
# the systemd unit (conf.d/fairlead.service, its paths rewritten for PREFIX and SYSCONFDIR) into UNITDIR;
# DESTDIR stages the tree for a package. The *.toml files go only into a config directory that has none:
# a reinstall never overwrites an operator's config nor adds files to it (a file put back could add a
# pool or a route). REFERENCE.md, keepalived.conf.example and grafana-fairlead.json are always refreshed.
# conf.d/ is the production starting point (placeholder servers, LeaderCheck credentials through
# credentials_file, relays commented out); `make run`'s demo config is bench/demo.d/, never installed.
# The service's user is not created (packages do that; the unit says how).
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
INSTALL_TOML := $(wildcard conf.d/*.toml)

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SYSCONFDIR)/fairlead $(DESTDIR)$(UNITDIR)
	install -m 0755 bin/fairlead $(DESTDIR)$(PREFIX)/bin/fairlead
	@if ls $(DESTDIR)$(SYSCONFDIR)/fairlead/*.toml >/dev/null 2>&1; then \
		echo "make install: $(DESTDIR)$(SYSCONFDIR)/fairlead already has *.toml files: left as they are"; \
	else echo install -m 0644 $(INSTALL_TOML) $(DESTDIR)$(SYSCONFDIR)/fairlead/; \
		install -m 0644 $(INSTALL_TOML) $(DESTDIR)$(SYSCONFDIR)/fairlead/; fi
	install -m 0644 conf.d/REFERENCE.md conf.d/keepalived.conf.example conf.d/grafana-fairlead.json $(DESTDIR)$(SYSCONFDIR)/fairlead/
	sed -e 's|/usr/local/bin/fairlead|$(PREFIX)/bin/fairlead|g' -e 's|/etc/fairlead|$(SYSCONFDIR)/fairlead|g' \
		conf.d/fairlead.service > $(DESTDIR)$(UNITDIR)/fairlead.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/fairlead.service
	@if [ -z "$(DESTDIR)" ] && ! getent passwd fairlead >/dev/null; then \
		echo "make install: create the service's user once: useradd --system --user-group --home-dir /var/lib/fairlead --shell /usr/sbin/nologin fairlead"; fi

# Starts a simulated ThingWorx cluster and fairlead in front of it (ports: the FAIRLEAD_DEMO_* variables,
# README: Quick start); Ctrl-C stops both.
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

# How the proxies scale with cores: 2 workers each (fairlead and Caddy GOMAXPROCS=2, HAProxy nbthread 2,
# nginx worker_processes 2), nothing pinned, on the throughput scenarios.
bench-2core: build
	bash bench/install-peers.sh
	$(GO) run ./bench/cmd/fairlead-bench -threads 2 -scenarios http-small,http-16k,ws-echo

# All tests under the race detector, plus the allocation guards of the hot paths, which run without it
# (the race detector allocates on its own), the cross builds and the platform tests (below). First, if
# bench/appconfig/node_modules is missing and npm is there, the official App Configuration JS client SDK
# the tests run is installed from its lock file (without Node those tests skip, saying so).
test:
	@if [ ! -d bench/appconfig/node_modules ] && command -v npm >/dev/null; then \
		npm ci --prefix bench/appconfig --no-audit --no-fund; fi
	$(GO) vet ./...
	@$(MAKE) --no-print-directory deadcode
	@$(MAKE) --no-print-directory cross
	$(GO) test -count=1 -run 'DoesNotAllocate' ./lb/... ./stickiness/
	@$(MAKE) --no-print-directory platform-tests
	$(GO) test -race -count=1 -timeout 8m ./...

# No function that nothing reaches, tests included (golang.org/x/tools' deadcode, fetched by the Go
# module proxy at the version named here): a function left behind by a change is deleted with it.
deadcode:
	@out=$$($(GO) run golang.org/x/tools/cmd/deadcode@v0.52.0 -test ./...) || exit 1; \
	if [ -n "$$out" ]; then echo "$$out"; echo "make deadcode: the functions above are reached by nothing: delete them"; exit 1; fi

# The platforms fairlead is built for besides this machine's (README: Where fairlead runs). make cross
# (in make test) type-checks fairlead's packages, their tests and the test kits they use, with all they
# import, the standard library included, for each of them from source (bench/cmd/fairlead-crosscheck:
# what go vet would find wrong there, in seconds, where a cold cross build takes a minute per platform);
# the linux/arm64 binary and tests are built for real by platform-tests and cmd/fairlead's tests. make
# cross-build builds fairlead for each and vets for each of CROSS_VET, for real (make -j2 cross-build
# runs two at once; minutes on a cold build cache). The bench, the fault suite and the HA test are
# Linux tooling.
CROSS      := linux/arm64 windows/amd64 windows/arm64 darwin/arm64 darwin/amd64 freebsd/amd64 freebsd/arm64
CROSS_VET  := windows/amd64 darwin/arm64
CROSS_PKGS := ./cmd/fairlead/... ./lb/... ./healthcheck/... ./stickiness/... ./bench/testkit/... ./bench/sim/...

comma := ,
space := $(subst ,, )

cross:
	$(GO) run ./bench/cmd/fairlead-crosscheck -platforms $(subst $(space),$(comma),$(strip $(CROSS))) $(CROSS_PKGS)

cross-build: $(addprefix cross-build-,$(subst /,-,$(CROSS)))

cross-build-%:
	GOOS=$(word 1,$(subst -, ,$*)) GOARCH=$(word 2,$(subst -, ,$*)) $(GO) build -o /dev/null ./cmd/fairlead
	$(if $(filter $(subst -,/,$*),$(CROSS_VET)),GOOS=$(word 1,$(subst -, ,$*)) GOARCH=$(word 2,$(subst -, ,$*)) $(GO) vet $(CROSS_PKGS))

# What differs by platform, tested: lb/nbio's and lb/tunnel's portable halves (the Windows, macOS and
# FreeBSD paths) here, and their Linux halves built for arm64 and run under qemu-user (Debian's
# qemu-user-static; .ci/run installs it). On an arm64 machine go test runs the latter natively anyway.
# cmd/fairlead's platforms_test.go runs a whole fairlead both ways.
platform-tests:
	$(GO) test -race -count=1 -tags nbio_portable ./lb/nbio/ ./lb/tunnel/
	@if [ "$$($(GO) env GOARCH)" = arm64 ]; then :; \
	elif command -v qemu-aarch64-static >/dev/null; then \
		echo "GOARCH=arm64 $(GO) test -count=1 -exec qemu-aarch64-static ./lb/nbio/ ./lb/tunnel/"; \
		GOARCH=arm64 $(GO) test -count=1 -exec qemu-aarch64-static ./lb/nbio/ ./lb/tunnel/; \
	else echo "qemu-aarch64-static is missing (apt-get install qemu-user-static): lb/nbio and lb/tunnel were not tested on arm64"; fi

# Fuzz targets (Name:package), run one after another for FUZZTIME each (go test -fuzz takes one target
# per package run); FUZZMINIMIZETIME bounds the shrinking of each new input (Go's default, 60s, would
# eat whole short runs). A failing input is written under the package's testdata/fuzz/<Name>/ and from
# then on runs as an ordinary test in `make test`: commit it with the fix.
FUZZTIME         ?= 30s
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS     := FuzzLoadConfig:./lb/config/ FuzzNewBuildsFromEveryConfigThatLoads:./lb/ FuzzStickyKey:./stickiness/ FuzzFramer:./lb/frontend/ FuzzRequestPath:./lb/ FuzzClientFaultIsNoServerFailure:./lb/ FuzzHTTP2Frames:./lb/frontend/

fuzz:
	@fail=0; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=$${t#*:}; \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg || fail=1; \
	done; exit $$fail

# Soak (minutes; not in CI): mixed HTTP and WebSocket traffic through a real fairlead process in front of
# the simulator, with a leader switch and a connection server restart; checks that fairlead's RSS,
# goroutines and open fds return to their baseline once the load stops (bench/soak).
SOAK ?= 5m

soak:
	$(GO) test -count=1 -timeout 0 -run Soak -v ./bench/soak -soak.duration $(SOAK)

# The fault suite, long form (make test runs the short form): each scenario under steady load through a
# real fairlead process, longer load phases and 1,000 tunnels, one line of figures per scenario (bench/faults).
faults:
	$(GO) test -count=1 -v -timeout 20m ./bench/faults/ -args -faults.long

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }

fmt:
	gofmt -w $$(git ls-files '*.go')

# The references generated from the code: conf.d/REFERENCE.md (every config key, its type, default and
# meaning) and lb/admin/ADMIN.md (admin endpoints, event kinds, the status document,
# metrics). make test fails while a committed one is stale.
reference:
	$(GO) test -count=1 -run '^TestConfigReferenceIsFresh$$' ./lb/config/ -update
	$(GO) test -count=1 -run '^TestAdminReferenceIsFresh$$' ./lb/admin/ -update

clean:
	rm -rf bin
