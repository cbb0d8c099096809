# projectmcp: every target installs what it needs through the Go module proxy (controller-gen is
# a go.mod tool; kube-apiserver and etcd come from `projectmcp envtest`, which builds them once).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO ?= go
FUZZTIME ?= 10m
# make test fuzzes for a count of inputs, not a duration: a -fuzztime duration races Go's fuzzing
# coordinator at its deadline (it can fail with a bare "context deadline exceeded" having found
# nothing), and a count has no deadline to race. 30,000 inputs take about 10 s here.
FUZZEXECS ?= 30000x
CONTROLLER_GEN := $(GO) tool controller-gen
# The directory of kube-apiserver and etcd, got (built on first use, then cached) by the
# projectmcp of this checkout. Recipes assign it to a shell variable first, so that a failure
# stops them instead of running the tests with an empty KUBEBUILDER_ASSETS.
ENVTEST_ASSETS := $(GO) run ./cmd/projectmcp envtest --print-path

# The image: $(IMAGE):$(VERSION) (HTTP servers only) and $(IMAGE):$(VERSION)-node (with Node.js
# for npx servers). config/manager/manager.yaml and the chart's appVersion name the same
# version (test/deploy checks it).
IMAGE ?= projectmcp
VERSION ?= 0.1.0
DOCKER ?= docker

.PHONY: all build test test-install unit envtest manifests generate verify vet lint fmt fuzz render clean bench bench-scale dev docs \
	docker-build docker-build-node chart-crds test-deploy faults test-first-run

all: build

## build: compile bin/projectmcp, static (no cgo), as the Dockerfile's build stage does, stamped
## with the commit it was built from when git knows it (`projectmcp version`; -buildvcs=auto
## wins over a GOFLAGS=-buildvcs=false)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o bin/projectmcp ./cmd/projectmcp

## docker-build: the image for HTTP servers, $(IMAGE):$(VERSION) (needs a Docker engine)
docker-build:
	$(DOCKER) build --target static -t $(IMAGE):$(VERSION) .

## docker-build-node: the image with Node.js for npx servers, $(IMAGE):$(VERSION)-node
docker-build-node:
	$(DOCKER) build --target node -t $(IMAGE):$(VERSION)-node .

## dev: run projectmcp locally for PROJECT (default: the bundled example): a local control
## plane, the controller, the gateway and the mirror; Ctrl-C stops everything and projectmcp
## exits 0, so make reports no error.
## The binary runs directly, not under `go run`, which exits 1 whenever it sees SIGINT.
PROJECT ?= examples/demo
dev: build
	bin/projectmcp dev --project $(PROJECT)

## render: print the ProjectMCP for the bundled example config
render:
	$(GO) run ./cmd/projectmcp render examples/demo/.dsh/mcp.json

## docs: the command reference (docs/cli and the README's command table) from the command tree
docs:
	$(GO) test ./cmd/projectmcp -run '^TestCLIReference$$' -count=1 -update

## generate: deepcopy functions from the API types
generate:
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

## manifests: CRD and RBAC from the API types and controller markers (and their copies in the
## chart)
manifests:
	$(CONTROLLER_GEN) crd rbac:roleName=projectmcp-controller paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(MAKE) -s chart-crds

## chart-crds: copy the generated CRD and ClusterRole into charts/projectmcp, which cannot read
## files outside itself (make verify fails when a copy is stale)
chart-crds:
	rm -f charts/projectmcp/crds/*.yaml
	cp config/crd/bases/*.yaml charts/projectmcp/crds/
	cp config/rbac/role.yaml charts/projectmcp/files/controller-role.yaml

## verify: regenerate and fail if any generated file changed
verify:
	@before=$$(find api config charts -type f | sort | xargs sha256sum); \
	$(MAKE) -s generate manifests; \
	after=$$(find api config charts -type f | sort | xargs sha256sum); \
	if [ "$$before" != "$$after" ]; then \
		diff <(echo "$$before") <(echo "$$after") || true; \
		echo "verify: generated files were stale and have been regenerated; commit them" >&2; exit 1; \
	fi

## vet: go vet and gofmt
vet:
	$(GO) vet ./...
	$(GO) vet -tags deploy ./test/deploy
	$(GO) vet -tags faults ./test/faults
	$(GO) vet -tags firstrun ./cmd/projectmcp
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out" >&2; exit 1; fi

## lint: golangci-lint with the linters and exclusions hack/golangci.yml gives and why, over
## every package, test files and the suites behind the deploy, faults and firstrun tags included.
## It is the go tool of hack/lint, a module of its own so that its many dependencies move none of
## helm's or controller-gen's in hack/tools; hack/lint only builds it, and it runs from the
## module root, whose packages it lints.
lint:
	linter=$$(cd hack/lint && $(GO) tool -n golangci-lint); \
	"$$linter" run --config hack/golangci.yml ./...

## envtest: print the directory of kube-apiserver and etcd (building them on first use)
envtest:
	@$(ENVTEST_ASSETS)

## test: everything CI runs: generated files fresh, vet, all tests against a real API server,
## and a short fuzz of the config parser
test: verify vet
	assets=$$($(ENVTEST_ASSETS)); KUBEBUILDER_ASSETS="$$assets" $(GO) test -count=1 ./...
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZEXECS) ./internal/config

## test-deploy: what puts projectmcp in a cluster: the image's binary compiled by the
## Dockerfile's own command (static) and run with the manifests' and the chart's args; the chart
## linted, rendered (helm, a go tool of hack/tools) and applied to a real API server with
## server-side dry run. Left out of test: a cold build cache needs minutes for helm.
test-deploy:
	cd hack/tools && $(GO) tool -n helm >/dev/null
	assets=$$($(ENVTEST_ASSETS)); KUBEBUILDER_ASSETS="$$assets" $(GO) test -count=1 -timeout 30m -tags deploy ./test/deploy

## faults: the fault-injection suite (test/faults): the projectmcp binary run as a controller
## process against a real API server (through a proxy it can cut), real and hostile MCP servers,
## live sessions; each fault hits a project of its own while a bystander project keeps calling,
## then the controller must be back to its baseline. Prints the table docs/faults.md carries (also
## written to FAULT_TABLE when set). About 5 minutes; FAULT_CYCLES sets the create/retire
## cycles (default 500). Left out of test for its length; CI runs it after make test.
faults:
	assets=$$($(ENVTEST_ASSETS)); KUBEBUILDER_ASSETS="$$assets" $(GO) test -tags faults -count=1 -timeout 20m -v \
		-run '^TestFaults$$' ./test/faults

## test-install: what `go install` users get: a freshly built projectmcp, outside the checkout and
## with an empty cache, builds kube-apiserver and etcd itself (two runs at once), then starts
## them. About a minute with a warm Go build cache, up to 20 without; not part of `test`.
test-install:
	env -u KUBEBUILDER_ASSETS PROJECTMCP_INSTALL_TEST=1 $(GO) test -count=1 -timeout 45m \
		-run '^TestInstalledBinaryGetsItsControlPlane$$' -v ./internal/controlplane

## test-first-run: a newcomer's first `projectmcp dev` of examples/demo with an empty npm
## cache (a fresh HOME): dev reports each server while npx downloads the packages, and the
## moment it prints the endpoint, `connect --write` works and a client lists the demo's tools.
## Needs the npm registry; about a minute beyond the control plane. Not part of test.
test-first-run:
	assets=$$($(ENVTEST_ASSETS)); KUBEBUILDER_ASSETS="$$assets" $(GO) test -tags firstrun -count=1 -timeout 20m -v \
		-run '^TestFirstRunEmptyNpmCache$$' ./cmd/projectmcp

## unit: the tests that need no API server, and no kube-apiserver is started. With
## PROJECTMCP_UNIT=1 and KUBEBUILDER_ASSETS unset (only here: `make test` always sets it), a test
## that needs the API server skips itself (testenv.Require, testenv.Lazy) and testenv.Start
## refuses to start one, so a test that forgets to say so fails instead. Left out: test/crd,
## where every test needs the API server.
unit:
	env -u KUBEBUILDER_ASSETS PROJECTMCP_UNIT=1 $(GO) test -count=1 \
		./api/... ./cmd/... ./controllers/... ./internal/... ./test/fixture/... ./test/deploy/...

## fuzz: fuzz the config parser for longer (10 minutes; FUZZTIME=1h make fuzz)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/config

clean:
	rm -rf bin

## bench: lifecycle latencies (create → Ready, repoint, rebuild; controllers) and the gateway's
## call overhead, mount latency and config-edit → list_changed (internal/gateway), against a
## real API server; a replica's proxy hop beside a bare reverse proxy's (internal/buckets); and
## a call's path with the server, a bare proxy, the gateway and the client each a process of its
## own (cmd/projectmcp)
bench:
	assets=$$($(ENVTEST_ASSETS)); export KUBEBUILDER_ASSETS="$$assets"; \
	$(GO) test ./controllers -run '^$$' -bench 'CreateReady|Repoint|Rebuild' -benchtime 10x; \
	$(GO) test ./internal/gateway -run '^$$' -bench 'Gateway(CallOverhead|Mount)' -benchtime 2000x -benchmem; \
	$(GO) test ./internal/gateway -run '^$$' -bench 'GatewayConfigEdit' -benchtime 50x; \
	$(GO) test ./internal/gateway -run '^$$' -bench 'GatewayThroughput' -benchtime 20x; \
	$(GO) test ./internal/buckets -run '^$$' -bench 'ProxyHop' -benchtime 2000x -count 3 -benchmem; \
	$(GO) test ./cmd/projectmcp -run '^$$' -bench 'CallPathProcesses(2025)?$$' -benchtime 2000x -count 3; \
	$(GO) test ./cmd/projectmcp -run '^$$' -bench 'CallPathProcessesThroughput' -benchtime 20x -count 2

## bench-scale: the scale benchmark (test/scale): one controller process against a real API
## server, SCALE projects × 3 HTTP servers (comma-separated sizes, each a stage of its own) and
## SCALE_STDIO projects × 3 stdio servers, 10 sessions a project of both revisions, then 100
## config edits timed to list_changed while 200 sessions call tools; prints memory, goroutines,
## rates and latencies per size and their growth; then SCALE_REPLICAS projects × 3 HTTP servers
## spread over three controller processes (bucket Leases), 10 sessions a project, calls through
## the serving replica beside calls through another; then SCALE_SHARE sessions on one project
## whose stdio server is share: session (a process each): mounts, memory per session and its
## connection, session end to process exit. About 30 minutes with the defaults on two cores; a
## quick check: make bench-scale SCALE=10 SCALE_STDIO=10 SCALE_REPLICAS=30 SCALE_SHARE=50. Not
## part of test.
SCALE ?= 10,100,1000
SCALE_STDIO ?= 100
SCALE_REPLICAS ?= 3000
SCALE_SHARE ?= 1000
bench-scale:
	assets=$$($(ENVTEST_ASSETS)); export KUBEBUILDER_ASSETS="$$assets"; \
	SCALE=$(SCALE) SCALE_STDIO=$(SCALE_STDIO) SCALE_REPLICAS=$(SCALE_REPLICAS) SCALE_SHARE=$(SCALE_SHARE) \
		$(GO) test ./test/scale -run '^$$' -bench '^BenchmarkScale(Share)?$$' -benchtime 1x -timeout 180m
