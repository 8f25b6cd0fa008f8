# Quick start: `make demo` runs the main example, `make test` runs every test, `make check` runs
# the static checks. Each installs RocksDB (Debian's librocksdb-dev) first when it is missing;
# `make test` also installs Chromium (Debian's chromium), in which the debug page's browser test
# runs.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Every Go module in the repository: the core at the root, each integration and examples/cluster
# in its folder. go.work lists them all, so that go doc, go test and editors work across modules
# from anywhere in the clone; `make check` fails when it does not.
MODULES     := $(sort $(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*' -not -path './.compat/*')))
# Every target builds, tests and checks each module alone, with its own go.mod, as a user's build
# of it does; go.work would select versions across all the modules instead.
export GOWORK = off
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# How much `make fuzz` fuzzes each target (FUZZTIME), and `make test` (FUZZCI). Counts, not
# durations: Go 1.26's fuzzing coordinator can fail a duration-bounded run with "context deadline
# exceeded" as the time runs out on a loaded machine, with no failing input. FUZZMINIMIZE bounds
# the runs spent minimizing each new interesting input, which the fuzzer does not count as
# inputs: Go's default of 60 s each, at the millisecond an input of FuzzScan takes on RocksDB,
# left `make test` minimizing for minutes.
FUZZTIME     ?= 200000x
FUZZMINIMIZE ?= 10000x
FUZZCI       ?= 20000x
FUZZCIMIN    ?= 500x
BENCHCOUNT  ?= 6
# `make bench`: how long each benchmark of the cost bounds of range locks runs, each of BENCHCOUNT
# times.
BOUNDTIME   ?= 300ms
# `make cluster-sim`: how many seeds of etcdcoord's protocol simulation to explore (0: as many as
# SIMTIME allows), from SIMFIRST, SIMSTEPS steps each.
SEEDS       ?= 0
SIMTIME     ?= 10m
SIMFIRST    ?= 1
SIMSTEPS    ?= 400

.PHONY: deps browser-deps demo cluster-demo cluster-sim test stress check install-check bench fuzz compat mutants acceptance

deps:
	@if [ ! -f /usr/include/rocksdb/c.h ]; then \
		echo "installing librocksdb-dev"; \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y librocksdb-dev; \
	fi

# The browser test of httpdebug (httpdebug/browsertest) drives a headless Chromium.
browser-deps:
	@if ! command -v chromium >/dev/null; then \
		echo "installing chromium"; \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; \
	fi

demo: deps
	$(GO) run ./examples/counter

# Three nodes on an embedded etcd: examples/cluster, a module of its own (it needs etcd).
cluster-demo: deps
	cd examples/cluster && $(GO) run .

# A longer exploration of etcdcoord's protocol simulation than `make test` runs: nodes on a
# simulated etcd under a seeded scheduler, their Txns waiting for each other across nodes, with
# the oracle (the deadlock oracle too) after every step. A failure prints its seed and steps, and
# how to replay them.
cluster-sim: deps
	cd etcdcoord && $(GO) test -race -count=1 -timeout 0 -run '^TestSimulation$$' -v . \
		-sim.seeds=$(SEEDS) -sim.duration=$(SIMTIME) -sim.first=$(SIMFIRST) -sim.steps=$(SIMSTEPS)

# Every test of every module under -race, the stress tests at the counts that prove their
# invariant; then the engine's tests (./internal/...) and the root's stress tests again with the
# tag invariants (internal/invariants): the engine checks its invariants at every release of a
# shard's mutex, and the tests that bound a cost in the steps the engine counts with the tag alone
# run (the root's is TestLocksAndWaitsCostSharersPlusQueue); then FUZZCI inputs per fuzz target.
# README.md says how long it takes.
INVARIANTS_RUN := Stress|^TestLocksAndWaitsCostSharersPlusQueue$$
test: deps browser-deps
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && $(GO) test -race -count=1 ./...); \
	done
	@echo "== . and ./internal/... with -tags invariants"
	$(GO) test -race -count=1 -tags invariants ./internal/...
	$(GO) test -race -count=1 -tags invariants -run '$(INVARIANTS_RUN)' .
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZCI) FUZZMINIMIZE=$(FUZZCIMIN)

# The packages with stress tests, again, with -long: each stress loop at its full count (the
# helper stressCount in each package's test helpers), the engine's model check with 3,000
# sequences, and etcdcoord's fault suite at five cycles with its retention test at 300,000 locks;
# then the engine's once more with the tag invariants, its invariants checked throughout.
stress: deps
	$(GO) test -race -count=1 -timeout 60m . ./internal/locktable -args -long
	cd etcdcoord && $(GO) test -race -count=1 -timeout 60m . -args -long
	$(GO) test -race -count=1 -timeout 60m -tags invariants ./internal/locktable -args -long

# The guards the tests defend: each mutant of mutants/catalogue/ (one line of a guard removed or
# inverted) applied to a copy of the tree, with the test that must kill it; fails when one lives,
# and prints a table of mutants, killing tests and seconds. MUTANTS=pattern runs only those named.
MUTANTS ?=
mutants: deps
	$(GO) run ./mutants -workers 2 $(if $(MUTANTS),-only '$(MUTANTS)')

# The acceptance suites kept beside the repository, when they are there: tests written against
# SPEC.md, run as outside modules against this checkout.
acceptance: deps
	@if [ -x ../shared/acceptance/run ]; then ../shared/acceptance/run; else echo "no ../shared/acceptance/run: nothing to run"; fi

# go test -fuzz takes one target per run, so every Fuzz function of the core is run in turn.
fuzz: deps
	@set -e; targets=$$($(GO) test -list '^Fuzz' . | grep '^Fuzz'); \
	for f in $$targets; do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) .; \
	done

# BENCHMARKS.md's tables, regenerated: recordlock and its peers in one run (bench/), medians and
# ratios against each target. All test binaries are built before any benchmark runs, so no
# compiler competes with the timed runs. After bench/'s run come the benchmarks of the cost bounds
# of range locks in the core module and internal/locktable, then P2 at GOMAXPROCS 1 and 2 for the
# table by GOMAXPROCS; the `sweep:` line before that run tells benchtable to keep its results out
# of the main table. A benchmark that fails (P6 does when the host cannot queue its waiters in
# time) prints FAIL and leaves its target without results; the runs after it still go. All of it
# goes to bench/bench.out, and benchtable rewrites the regions of BENCHMARKS.md between
# `<!-- benchtable:NAME -->` and `<!-- end -->` from it, keeping the prose around them, and draws
# P10's chart, docs/p10-hot-record-queue.svg, and the chart of range locks by locks held,
# docs/ranges-held-locks.svg. `bin/benchtable -doc BENCHMARKS.md < bench/bench.out` does the same
# again from a saved run.
bench: deps
	cd bench && $(GO) build -o ../bin/benchtable ./cmd/benchtable && $(GO) test -c -o ../bin/bench.test .
	$(GO) test -c -o bin/core.test . && $(GO) test -c -o bin/locktable.test ./internal/locktable
	cd bench && { ../bin/bench.test -test.run '^$$' -test.bench . -test.benchmem -test.count $(BENCHCOUNT) \
		-test.timeout 60m; \
		(cd .. && bin/core.test -test.run '^$$' -test.bench '^BenchmarkTxnKeyInsideOneOfManyRanges$$' \
			-test.benchmem -test.count $(BENCHCOUNT) -test.benchtime $(BOUNDTIME)); \
		(cd ../internal/locktable && ../../bin/locktable.test -test.run '^$$' -test.benchmem \
			-test.bench '^Benchmark(SharedKeyUnderSharedRanges|KeyLockBesideQueuedRanges|LocksWithRangeSharersAndQueued|RangeWaitCheck)$$' \
			-test.count $(BENCHCOUNT) -test.benchtime $(BOUNDTIME)); \
		echo 'sweep: gomaxprocs'; \
		../bin/bench.test -test.run '^$$' -test.bench '^BenchmarkParallelDistinctKeys$$' -test.cpu 1,2 \
		-test.benchmem -test.count $(BENCHCOUNT) -test.timeout 30m; } | tee bench.out | \
		../bin/benchtable -svg ../docs/p10-hot-record-queue.svg -ranges-svg ../docs/ranges-held-locks.svg \
			-doc ../BENCHMARKS.md

# gofmt over the repository, go.work against the modules, then go vet, staticcheck and a
# go.mod/go.sum check (go mod tidy -diff: a stale go.sum fails here, not on a user's machine) in
# every module.
check: deps
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l found unformatted files:"; echo "$$out"; exit 1; fi
	@listed=$$($(GO) work edit -json go.work | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p' | LC_ALL=C sort); \
	if [ "$$listed" != "$$(printf '%s\n' $(MODULES))" ]; then \
		echo "go.work does not list every module: run go work use -r . (and drop what it lists that is gone)"; \
		echo "listed:"; echo "$$listed"; echo "modules:"; printf '%s\n' $(MODULES); exit 1; \
	fi
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) mod tidy -diff); \
	done

# The README's Install, followed in empty modules: examples/basic and examples/cluster copied
# out of the repository, built against this clone through a replace, and run.
install-check: deps
	GO=$(GO) ./.ci/install-check.sh

# The root package and etcdcoord tested against Debian 13's RocksDB 9.10 with grocksdb v1.9.8,
# which compat/compat.sh downloads into .compat/ (nothing is installed).
compat:
	GO=$(GO) ./compat/compat.sh

# Cluster locks under real faults: jepsen/, a module of its own, builds etcd v3.6.16 and the
# harness into bin/, then runs recordlock and the etcd-Mutex control JEPSEN_TIME each on three
# etcd processes and three node processes under a nemesis drawn from JEPSEN_SEED (a fresh seed
# when empty; the report names it). It writes jepsen-report.json and, for a history that is not
# linearizable, porcupine's view in jepsen-out/. RELIABILITY.md says what it checks.
JEPSEN_TIME ?= 5m
JEPSEN_SEED ?=

.PHONY: jepsen
jepsen: deps
	cd jepsen && $(GO) build -o ../bin/etcd go.etcd.io/etcd/server/v3 && $(GO) build -o ../bin/jepsen .
	nice -n 10 bin/jepsen -time $(JEPSEN_TIME) $(if $(JEPSEN_SEED),-seed $(JEPSEN_SEED)) \
		-etcd bin/etcd -report jepsen-report.json -out jepsen-out
