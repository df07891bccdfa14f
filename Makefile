# Every target installs what it needs first, so a fresh clone needs only `make demo` or `make test`.
SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COLLECTOR := collector/dist/otelcol-grpc-overhead
TOXIPROXY := tools/bin/toxiproxy-server
JAEGER := tools/bin/jaeger
GRPC_GO_PEER := tools/bin/grpc-go-peer
OIDC_PROVIDER := tools/bin/oidc-provider
GRPC_JAVA_PEER := tools/grpc-java-peer/grpc-java-peer.jar
PROTOS := instrumented-service/prediction/src/grpc_overhead/prediction/protos
INSTRUMENTATION := instrumented-service/instrumentation

.PHONY: setup system-packages collector toxiproxy jaeger user-venv grpc-go-peer oidc-provider grpc-java-peer otel-javaagent node-peer protos demo test test-fast bench lint format clean

setup: $(STAMP)

# Both distributions, editable: grpc-overhead-instrumentation (what a production
# service installs) and grpc-overhead, which depends on it.
$(STAMP): pyproject.toml $(INSTRUMENTATION)/pyproject.toml
	@test -x $(PYTHON) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ./$(INSTRUMENTATION) -e '.[dev]'
	@touch $(STAMP)

system-packages:
	@bash scripts/system-packages.sh

collector: $(COLLECTOR)

$(COLLECTOR): collector/manifest.yaml collector/build.sh
	bash collector/build.sh

toxiproxy: $(TOXIPROXY)

# The ground-truth harness's TCP proxy (latency and bandwidth toxics), built from Go modules.
$(TOXIPROXY): scripts/build-toxiproxy.sh
	bash scripts/build-toxiproxy.sh

jaeger: $(JAEGER)

# Jaeger v2 (the fan-out's second exporter, `import jaeger`, `demo --jaeger`), built from Go
# modules through a wrapper module; the first build takes minutes, so it runs niced.
$(JAEGER): scripts/build-jaeger.sh
	nice -n 10 bash scripts/build-jaeger.sh

# A user's venv (grpc-overhead-instrumentation as a built wheel + the OpenTelemetry packages
# users have) for the coexistence tests: build/user-venv/KEY, KEY a hash of what it is built from.
user-venv: setup
	$(PYTHON) -m harness.user_venv

grpc-go-peer: $(GRPC_GO_PEER)

# A real grpc-go client/server with gRPC's own OpenTelemetry tracing (gRFC A72) or otelgrpc.
$(GRPC_GO_PEER): scripts/build-go-peer.sh $(wildcard peers/grpc-go/*.go) peers/grpc-go/go.mod peers/grpc-go/go.sum
	bash scripts/build-go-peer.sh peers/grpc-go grpc-go-peer

# A real OpenID Connect provider for the app's OIDC login tests (tests/app/test_oidc_login.py).
oidc-provider: $(OIDC_PROVIDER)

$(OIDC_PROVIDER): scripts/build-go-peer.sh $(wildcard peers/oidc-provider/*.go) peers/oidc-provider/go.mod peers/oidc-provider/go.sum
	bash scripts/build-go-peer.sh peers/oidc-provider oidc-provider

grpc-java-peer: system-packages $(GRPC_JAVA_PEER)

# A real grpc-java client/server with grpc-opentelemetry tracing (gRFC A72), built by Maven.
$(GRPC_JAVA_PEER): scripts/build-grpc-java-peer.sh peers/grpc-java/pom.xml $(shell find peers/grpc-java/src -name '*.java')
	bash scripts/build-grpc-java-peer.sh

# The OpenTelemetry Java agent 2.x jars (the versions the script pins), from Maven, cached in
# tools/otel-javaagent/: the tests attach it to the grpc-java peer with default settings.
otel-javaagent: system-packages
	@bash scripts/fetch-otel-javaagent.sh

# A real @grpc/grpc-js client/server traced by the OpenTelemetry Node SDK with its defaults
# (OTLP over HTTP/protobuf), installed by `npm ci` from peers/node/package-lock.json. The
# script is a no-op when its stamp matches the lock file; main.js is copied on every run.
node-peer: system-packages
	bash scripts/build-node-peer.sh

protos: setup
	$(PYTHON) -m grpc_overhead.prediction.protos.generate

demo: setup
	$(VENV)/bin/grpc-overhead demo

# The suite on two workers (docs/testing.md): a test file runs whole on one worker, so its
# module fixtures start once. Beside them, the tests marked timing (ground truth,
# experiments: they judge real calls' timings, some burn CPU on purpose) run one after
# another, with the workers niced until they end (harness/suite.py). Both parts always
# run; either failing fails the target. PYTEST_WORKERS=0: one process. Before and after,
# one line says how fast the machine is (harness/machine_speed.py), so that runs on
# different hours compare.
PYTEST_WORKERS ?= 2
# The project's own sources, compiled once before the tests: they are editable installs, so
# with PYTHONDONTWRITEBYTECODE set (as on these machines) each of the suite's Python
# processes compiled them again (0.13 CPU-s of a serve's or report's start-up).
SOURCES = analyzer/src app/src cli/src collector/src processes/src instrumented-service harness

test: setup system-packages collector toxiproxy jaeger user-venv grpc-go-peer oidc-provider grpc-java-peer otel-javaagent node-peer
	@$(VENV)/bin/python -m compileall -q $(SOURCES) > /dev/null; \
	$(VENV)/bin/python -m harness.machine_speed; \
	$(VENV)/bin/python -m harness.suite $(PYTEST_WORKERS); suite=$$?; \
	$(VENV)/bin/python -m harness.machine_speed; \
	test $$suite -eq 0

test-fast: setup
	$(VENV)/bin/pytest -m unit

bench: setup system-packages collector toxiproxy grpc-go-peer grpc-java-peer otel-javaagent node-peer
	$(PYTHON) -m bench.run

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) collector/dist tools .pytest_cache
