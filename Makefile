# One way to do each thing. `make run` and `make test` are the README's two commands; `make check` is the
# inner loop; `make docs` builds the documentation site into build/site.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/pytest -q -ra
# What CI keeps from `make test` besides its log (which has the 30 slowest tests): a JUnit report.
REPORT := build/junit.xml
# The tiers are pytest markers, set from what a test uses (tests/conftest.py, the test bed's pytest plugin):
# e2e (the test bed), trainer (a real trainer), image (a podman build), slow (seconds of work of its own).
QUICK := not (e2e or trainer or image or slow)

# make test runs the tests on this many pytest-xdist workers, a test file per worker at a time (a file's module
# fixtures stay on one worker), the files in the order tests/ordering.py gives them (the longest first; xdist
# would reorder them by their count of tests without --no-loadscope-reorder). Each worker has its own control
# plane and operator. The tests mostly wait (on the operator, the simulated GKE's and kubelet's clocks): a
# fresh-clone run on the 2-core machine, 2026-11-30, spent 2,183 s in tests and 953 CPU-s on them. Three
# workers: pytest 759 s (commit 5a264ca); four: 641 s and the cores 77% busy (1da55c6); five, in a slower hour
# than four's 733 s: 743 s and 86% busy (docs/contributing/index.md#how-long-make-test-takes).
WORKERS ?= 4

.PHONY: venv run check quick e2e test lint typecheck docs prepare generate durations clean

# The venvs are filled by uv (from PyPI, pinned here, installed into the venv by pip): it installs the 2.4 GB of
# TensorFlow, JAX and the rest in parallel and links them from its cache (~/.cache/uv) on the next clone. It
# compiles the bytecode as pip does (else every first import would, in each test worker and trainer at once).
# Both venvs on the 2-core machine, 2026-11-29: 134 s with pip (every time: pip keeps no wheel cache here);
# with uv, its cache warm and the bytecode compiled, 57 s in a fresh clone (.ci/run's setup).
UV_VERSION := 0.13.9
UV := $(BIN)/uv

$(UV):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): pyproject.toml sandbox/pyproject.toml trainer-image/pyproject.toml | $(UV)
	$(UV) pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev,trainer,jax]' -e ./sandbox -e ./trainer-image
	touch $(STAMP)

# The operator's own environment, installed as its image installs it (operator/Dockerfile): exactly
# operator/constraints.txt, then the package without dependencies (editable: the worktree's code). The test
# bed runs `tpujob operator` from it (tpujob_sandbox.operators.operator_python), so the operator the tests and
# benches measure has what the image has and nothing of the test bed's: kopf imports the `kubernetes`
# package whenever it is installed (42 MiB the image does not have).
OPERATOR_VENV := $(VENV)/operator
OPERATOR_STAMP := $(OPERATOR_VENV)/.installed

$(OPERATOR_STAMP): operator/constraints.txt pyproject.toml | $(UV)
	test -x $(OPERATOR_VENV)/bin/python || $(PY) -m venv $(OPERATOR_VENV)
	$(UV) pip install -q --compile-bytecode --python $(OPERATOR_VENV)/bin/python \
		--constraint operator/constraints.txt --requirement operator/constraints.txt
	$(UV) pip install -q --compile-bytecode --python $(OPERATOR_VENV)/bin/python --no-deps -e .
	touch $(OPERATOR_STAMP)

venv: $(STAMP) $(OPERATOR_STAMP)

# The main job on an embedded default: no GKE account needed.
run: $(STAMP)
	$(BIN)/tpujob run examples/digits-local.yaml --local

lint: $(STAMP)
	$(BIN)/ruff check operator sandbox trainer-image tests scripts bench
	$(BIN)/ruff format --check operator sandbox trainer-image tests scripts bench
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml), strict: a broken link or anchor, or a page outside the navigation, fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# mypy --strict over what pyproject.toml names: the operator, its test bed, the trainer, bench/ and scripts/. Its
# cache is the machine's, beside the test bed's binaries, so that a fresh clone does not check every module
# again: 20 s cold, under a second warm (mypy re-checks a module whose source's hash changed, in any clone).
MYPY_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tpujob/mypy

typecheck: $(STAMP)
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

# The inner loop: lint, import contracts, types, the docs, and every test that needs no control plane, no image
# build and no real trainer, side by side (each target's output kept together). The quick tests on two
# workers: 44 s instead of 57 s on the 2-core machine (collection is paid twice).
check: venv
	$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck docs quick

quick: venv
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder -m "$(QUICK)"

# The operator on the test bed, end to end, with no real trainer: its jobs run a plain image.
e2e: venv
	$(PYTEST) -m "e2e and not trainer" --durations=30

# What the tests build on first use (the control plane, the images, helm and Prometheus), built side by side.
prepare: venv
	$(BIN)/python -m tests.prepare

# Everything CI proves: lint, types, the docs, and every test (quick, e2e on the test bed, trainer, chart, images,
# the docs in a browser), with the 30 slowest and a JUnit report. Lint, types and the docs run beside `prepare`,
# which matters on a cold machine.
test: venv
	mkdir -p $(dir $(REPORT))
	$(MAKE) --no-print-directory -j3 lint typecheck docs prepare
	$(PYTEST) -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 --junitxml=$(REPORT)

# How long each test file took in the last `make test` (its JUnit report), for tests/ordering.py to run the
# longest first. A measurement, not a generated file: re-run after a change moves the slow files.
durations: $(STAMP)
	$(BIN)/python scripts/ci_timing.py $(REPORT) --write-durations tests/durations.json

# Generated files: the CRD and the chart's copy of it (tests/unit/test_generated.py checks drift); the chart's
# RBAC rules, CRD without CEL, values.schema.json and dashboard (tests/chart/test_chart.py checks drift); the
# operator image's constraints (tests/unit/test_generated.py checks every dependency is named); the docs'
# reference pages (tests/unit/test_generated.py checks drift); the benchmark tables of docs/benchmarks.md, from
# bench/results (tests/unit/test_bench_tables.py checks drift).
generate: $(STAMP)
	$(BIN)/tpujob crd > crds/tpujob.dev_tpujobs.yaml
	mkdir -p charts/tpujob-operator/crds
	cp crds/tpujob.dev_tpujobs.yaml charts/tpujob-operator/crds/tpujob.dev_tpujobs.yaml
	$(BIN)/python scripts/generate_chart.py
	$(BIN)/python scripts/operator_constraints.py > operator/constraints.txt
	$(BIN)/python scripts/generate_docs.py
	$(BIN)/python scripts/bench_tables.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
