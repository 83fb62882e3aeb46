# The two commands of the README: `make run` (the main job, embedded default) and `make test`.
# Each does its own set-up on a fresh clone: a virtualenv in .venv, and the npm peers for the tests.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NPM_STAMP := tests/npm/node_modules/.installed-stamp

.PHONY: run test test-fast lint docs bench setup clean prometheus bpftrace chromium

# Bytecode for the editable source: with PYTHONDONTWRITEBYTECODE set (as here), every proxy and mock
# server of the bench would otherwise compile our modules again at start-up (~40 ms of CPU each).
BYTECODE = $(BIN)/python -m compileall -q src >/dev/null

run: $(STAMP)
	$(BYTECODE)
	$(BIN)/mcpfault bench

test: $(STAMP) $(NPM_STAMP) prometheus bpftrace chromium lint
	$(BIN)/pytest

# The quick loop: lint, then every test not marked slow (no real subprocess sessions, sidecars or site
# builds); what `make test` runs in full before a change lands.
test-fast: $(STAMP) lint
	$(BIN)/pytest -m "not slow" -q

# The documentation site (MkDocs with Material) into site/, strict: a broken link or anchor fails the build.
# The command and fault-type references are generated from the parsers and the catalog (docs/hooks.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Proxy overhead: direct, minimal relay, mcpfault untraced, with spans to a file, with spans and metrics;
# memory after 10,000 and 100,000 calls; 1,000 HTTP sessions through one proxy (docs/results/scale.md);
# then the default matrix's CPU per task (the whole process tree) and wall time. Each writes its report
# under docs/results/ and its figures to docs/results/figures/*.json, from which the README's block is
# rewritten last (benchmarks/readme_figures.py).
FIGURES := docs/results/figures
TRACED = $(BIN)/python -m mcpfault proxy --config profiles/baseline.toml --no-summary --spans /tmp/mcpfault-bench-spans.jsonl
# The side-effect probe's cost (added p50 with --probe on): the fake sidecar, and eBPF when root.
PROBED = $(BIN)/python -m mcpfault proxy --config profiles/baseline.toml --no-summary
bench: $(STAMP)
	$(BYTECODE)
	rm -f /tmp/mcpfault-bench-spans.jsonl
	$(BIN)/python benchmarks/stdio_overhead.py --markdown docs/results/performance.md --json $(FIGURES)/stdio.json \
		--config "mcpfault-traced=$(TRACED) -- $(BIN)/python benchmarks/echo_server.py" \
		--config "mcpfault-traced-client-spans=$(TRACED) --client-spans -- $(BIN)/python benchmarks/echo_server.py" \
		--config "mcpfault-traced-metrics=$(TRACED) --metrics-addr 127.0.0.1:19464 -- $(BIN)/python benchmarks/echo_server.py" \
		--config "mcpfault-10-rules=$(BIN)/python -m mcpfault proxy --config benchmarks/profiles/never_fire.toml --no-summary -- $(BIN)/python benchmarks/echo_server.py" \
		--config "mcpfault-probe-fake=$(PROBED) --probe fake:benchmarks/probe_events.json -- $(BIN)/python benchmarks/echo_server.py" \
		$(if $(filter 0,$(shell id -u)),--config "mcpfault-probe-ebpf=$(PROBED) --probe ebpf -- $(BIN)/python benchmarks/echo_server.py") \
		--timeout 60
	$(BIN)/python benchmarks/http_overhead.py --markdown docs/results/performance.md --json $(FIGURES)/http.json
	$(BIN)/python benchmarks/memory.py --markdown docs/results/memory.md --json $(FIGURES)/memory.json
	$(BIN)/python benchmarks/scale.py --sessions 1000 --churn 1000 --markdown docs/results/scale.md \
		--json $(FIGURES)/scale.json
	$(BIN)/python benchmarks/bench_cpu.py --markdown docs/results/bench-cpu.md --json $(FIGURES)/bench-cpu.json
	$(BIN)/python benchmarks/readme_figures.py --figures $(FIGURES) --readme README.md

setup: $(STAMP) $(NPM_STAMP) prometheus bpftrace chromium

# The tests scrape with a real Prometheus and push to a real Pushgateway (Debian's packages, run by
# the tests on 127.0.0.1; the system services are not started); docker-compose validates compose.yaml.
prometheus:
	@if [ -x /usr/bin/prometheus ] && [ -x /usr/bin/prometheus-pushgateway ] && [ -x /usr/bin/docker-compose ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-pushgateway docker-compose >/dev/null; \
	else echo "make test: run as root once, or: sudo apt-get install prometheus prometheus-pushgateway docker-compose" >&2; fi

# The side-effect probe's eBPF tests trace real syscalls: Debian's bpftrace, and tracefs mounted
# where bpftrace looks for the tracepoints (root only, as CI runs; the sidecar mounts it too).
bpftrace:
	@if [ -x /usr/bin/bpftrace ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bpftrace >/dev/null; \
	else echo "make test: run as root once, or: sudo apt-get install bpftrace" >&2; fi
	@if [ "$$(id -u)" = 0 ] && [ ! -d /sys/kernel/tracing/events ]; then mount -t tracefs nodev /sys/kernel/tracing; fi

# report.html is tested in a real browser: Debian's chromium, headless, driven over the DevTools
# protocol from Python (tests/browser_support.py); no browser download, no driver.
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else echo "make test: run as root once, or: sudo apt-get install chromium" >&2; fi

# The Chaos Toolkit extension is its own distribution (integrations/chaostoolkit-mcpfault), installed
# editable beside mcpfault; chaostoolkit 1.19.0 is the newest CLI on Python 3.11 (1.20+ need 3.12).
CTK_EXTENSION := integrations/chaostoolkit-mcpfault
$(STAMP): pyproject.toml $(CTK_EXTENSION)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# compat: editable installs as plain paths in a .pth; setuptools' default import finder costs every
	# Python start of the venv ~23 ms of CPU (each mock server and proxy of the bench pays it).
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --config-settings editable_mode=compat \
		-e ".[dev]" -e $(CTK_EXTENSION) "chaostoolkit==1.19.0"
	$(BYTECODE)
	touch $@

$(NPM_STAMP): tests/npm/package.json tests/npm/package-lock.json
	npm ci --prefix tests/npm --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) tests/npm/node_modules .mypy_cache .ruff_cache .pytest_cache site
