# keyshare — conventional targets. cgo is required (confluent-kafka-go ships a
# static librdkafka; gcc is all it needs).
export CGO_ENABLED := 1

GO        ?= go
PKGS      := ./...
BIN       := bin/keyshare
# The benchmarks' binary, apart from the product (cmd/keyshare-bench).
BENCH_BIN := bin/keyshare-bench
# The whole suite must stay well under CI's limit on 2 cores with -race.
# Its parallel tests mostly wait (sessions, intervals, drains), each on
# an etcd and a broker of its own, so four run at a time, not two (the
# cores' count): consumer takes 94 s instead of 150, cmd/keyshare 139
# instead of 193. The two cores were still idle two thirds of the time
# (consumer: 70 s of CPU in 97 s), so two packages run at once: the
# suite took 373 s, where one at a time it takes at least the sum of the
# packages' times, 675 s; each package's time changed little.
TESTFLAGS ?= -race -count=1 -p 2 -parallel 4 -timeout 9m
FUZZTIME  ?= 30s
# The second tier, on a real broker. A package's tests share its one broker
# and run one at a time; two packages, each with a broker of its own, run
# at once (their caches of Kafka's jars and PostgreSQL take a lock): the
# packages took 449 s instead of 706, each package's own time little changed.
KAFKA_TESTFLAGS ?= -race -count=1 -p 2 -timeout 15m
# coord's model tests run one goroutine over an in-memory store: built
# without the race detector (coord/model_run_test.go), six times faster.
MODEL_TESTFLAGS ?= -count=1 -timeout 9m

.PHONY: all build test test-kafka demo bench fuzz lint tidy clean chaos soak bench-peers bench-streams proto image

all: build

build:
	$(GO) build -o $(BIN) ./cmd/keyshare

# The member image (deploy/Dockerfile: keyshare built as above, on a
# distroless glibc base; docs/deploy.md). Needs a container engine: docker,
# or podman where docker is missing or has no daemon. IMAGE names the tag.
IMAGE ?= keyshare:dev
image:
	@engine=""; \
	if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker; \
	elif command -v podman >/dev/null 2>&1; then engine=podman; fi; \
	if [ -z "$$engine" ]; then \
		echo "make image needs a container engine: docker with a running daemon, or podman; none here"; \
		echo "(go test ./deploy/ checks the image's file set without one: docs/deploy.md)"; exit 1; \
	fi; \
	echo "$$engine build -f deploy/Dockerfile -t $(IMAGE) ."; \
	$$engine build -f deploy/Dockerfile -t $(IMAGE) .

test:
	$(GO) test $(TESTFLAGS) $(PKGS)
	$(GO) test $(MODEL_TESTFLAGS) -run Model ./coord/

# The second tier: the devcluster and testutil checks, the consumer
# integration tests, the PostgreSQL sink's end to end, the keyed state's counts, the CLI end to end
# and the short fault-matrix rows, the keyed-state rows among them,
# against Apache Kafka (devcluster.ApacheKafkaVersion, KRaft, one JVM per
# test binary; a cluster per chaos row). Needs java 17+; mvn fetches the
# broker's jars from Maven Central once (docs/compatibility.md).
test-kafka:
	KEYSHARE_KAFKA=apache $(GO) test $(KAFKA_TESTFLAGS) ./internal/devcluster/ ./testutil/ ./consumer/ ./admin/ ./pgsink/ ./statestore/ ./cmd/keyshare/
	KEYSHARE_KAFKA=apache $(GO) test $(KAFKA_TESTFLAGS) -run 'TestFaultMatrix|TestState' ./chaos/

demo: build
	./$(BIN) demo

# Go micro-benchmarks, then the side-by-side report (bin/benchmarks-report.md;
# docs/benchmarks.md takes its figures from it and says so);
# keyshare-bench runs its member processes as `keyshare-bench member`.
bench:
	$(GO) build -o $(BENCH_BIN) ./cmd/keyshare-bench
	$(GO) test -run '^$$' -bench . -benchmem ./ledger/ ./consumer/ ./coord/ ./consumer/kafkaoffsets/ ./deliver/ ./bench/worksleep/
	./$(BENCH_BIN) --write bin/benchmarks-report.md

# Each fuzz target runs for FUZZTIME; go test -fuzz takes one target at a time.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./ledger/
	$(GO) test -run '^$$' -fuzz '^FuzzOperations$$' -fuzztime $(FUZZTIME) ./ledger/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./keystate/
	$(GO) test -run '^$$' -fuzz '^FuzzHeadersRoundTrip$$' -fuzztime $(FUZZTIME) ./keystate/
	$(GO) test -run '^$$' -fuzz '^FuzzModel$$' -fuzztime $(FUZZTIME) ./keystate/
	for f in $$($(GO) test -list '^FuzzDecode' ./schema/ | grep '^Fuzz'); do \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./schema/ || exit 1; \
	done

# The soak: a nemesis picks faults from the matrix's catalogue every
# 10-30 s for SOAK (the seed is printed; KEYSHARE_SOAK_SEED repeats it),
# with the matrix's checker over the whole run and the members' resources
# sampled for growth (docs/reliability.md). KEYSHARE_KAFKA=apache runs it on
# three Apache Kafka brokers.
SOAK ?= 30m
soak:
	KEYSHARE_SOAK=$(SOAK) $(GO) test -count=1 -run TestSoak -timeout 24h -v ./chaos/

# The long form of the fault matrix; writes its table in docs/reliability.md.
chaos:
	KEYSHARE_CHAOS=long $(GO) test -count=1 -run TestFaultMatrix -timeout 30m -v ./chaos/

# gofmt and import grouping (.ci/imports) of the tree CI reads (tracked
# and untracked-not-ignored .go files as they stand), go vet, then staticcheck with its
# default checks (exceptions are //lint:ignore comments at the site, each
# with its reason). staticcheck and goimports are tool dependencies in
# go.mod (go tool ...), so their versions are pinned with the module's.
# govulncheck is left out: it reads its database from vuln.go.dev, which the
# CI machine cannot reach (it reaches only the module proxy).
lint:
	@out=$$(git ls-files --cached --others --exclude-standard '*.go' | sort -u | while read -r f; do [ -f "$$f" ] && echo "$$f"; done | xargs gofmt -l); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@GO="$(GO)" .ci/imports
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

# Regroups the imports that make lint reports.
.PHONY: imports
imports:
	GO="$(GO)" .ci/imports -w

tidy:
	$(GO) mod tidy

# Regenerates deliver/deliverpb's Go code from deliver.proto (the generated
# files are committed: make test needs no protoc). protoc comes from Maven
# Central (com.google.protobuf:protoc, the linux-x86_64 exe) through mvn,
# once, into PROTOC_DIR; the Go plugins are tool dependencies in go.mod
# (go tool protoc-gen-go, protoc-gen-go-grpc), pinned with the module's.
# TestGeneratedCodeMatchesProto (deliver/deliverpb) fails, without protoc,
# when the committed code no longer declares what the .proto does.
PROTOC_VERSION ?= 4.33.5
PROTOC_DIR     ?= bin/protoc-$(PROTOC_VERSION)
PROTOC         := $(PROTOC_DIR)/protoc-$(PROTOC_VERSION)-linux-x86_64.exe
proto: $(PROTOC)
	mkdir -p $(PROTOC_DIR)/plugins
	$(GO) build -o $(PROTOC_DIR)/plugins/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
	PATH="$(CURDIR)/$(PROTOC_DIR)/plugins:$$PATH" $(PROTOC) --proto_path=deliver/deliverpb \
		--go_out=deliver/deliverpb --go_opt=paths=source_relative \
		--go-grpc_out=deliver/deliverpb --go-grpc_opt=paths=source_relative deliver.proto
	$(GO) tool goimports -local github.com/keyshare/keyshare -w deliver/deliverpb/*.pb.go

$(PROTOC):
	mvn -q dependency:copy -Dartifact=com.google.protobuf:protoc:$(PROTOC_VERSION):exe:linux-x86_64 -DoutputDirectory=$(PROTOC_DIR)
	chmod +x $@

clean:
	rm -rf bin
	$(GO) clean -testcache

# Kafka Streams against keyshare's keyed state (docs/benchmarks.md, "Kafka
# Streams and keyed state"): a per-key count with a 5 ms lookup a record on
# 1 and 4 partitions of one Apache Kafka broker. STREAMS_ARGS: streamsbench's
# flags (--records 2000 --runs 1: a smoke run of about a minute).
bench-streams:
	cd bench/streams && mvn -q package -DskipTests
	$(GO) build -o bin/streamsbench ./bench/streams/cmd/streamsbench
	./bin/streamsbench -v $(STREAMS_ARGS)

# keyshare against the real peers (Confluent Parallel Consumer, share groups,
# a plain consumer group) on one Apache Kafka 4.2 broker; writes its section
# of docs/benchmarks.md. Needs java 17+ and mvn (Maven Central). Knobs:
# PEERS_RECORDS, PEERS_RUNS, PEERS_WORKLOADS, PEERS_PEERS, PEERS_FAILURES,
# PEERS_SHARE_ARGS (bench/peers/cmd/peerbench). QUICK=1: a smoke run of a few
# minutes (2,000 records, 1 run) that writes bin/bench-peers-quick.md instead.
bench-peers:
	cd bench/peers && mvn -q package -DskipTests
	$(GO) build -o bin/peerdriver ./bench/peers/cmd/peerdriver
	$(GO) build -o bin/peerbench ./bench/peers/cmd/peerbench
	./bin/peerbench -v $(if $(QUICK),--quick --write bin/bench-peers-quick.md,--write docs/benchmarks.md)
