# keyshare — conventional targets. cgo is required (confluent-kafka-go ships a
# static librdkafka; gcc is all it needs).
export CGO_ENABLED := 1

GO        ?= go
PKGS      := ./...
BIN       := bin/keyshare
# The whole suite must stay well under CI's limit on 2 cores with -race.
TESTFLAGS ?= -race -count=1 -p 1 -timeout 9m
FUZZTIME  ?= 30s

.PHONY: all build test demo bench fuzz lint tidy clean chaos

all: build

build:
	$(GO) build -o $(BIN) ./cmd/keyshare

test:
	$(GO) test $(TESTFLAGS) $(PKGS)

demo: build
	./$(BIN) demo

# Go micro-benchmarks, then the side-by-side report (writes docs/benchmarks.md).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./ledger/ ./consumer/
	./$(BIN) bench --write docs/benchmarks.md

# Each fuzz target runs for FUZZTIME; go test -fuzz takes one target at a time.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./ledger/
	$(GO) test -run '^$$' -fuzz '^FuzzOperations$$' -fuzztime $(FUZZTIME) ./ledger/

# The long form of the fault matrix; writes docs/reliability.md.
chaos:
	KEYSHARE_CHAOS=long $(GO) test -count=1 -run TestFaultMatrix -timeout 30m -v ./chaos/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

tidy:
	$(GO) mod tidy

clean:
	rm -rf bin
	$(GO) clean -testcache
