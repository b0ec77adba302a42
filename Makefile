# One way to do each thing. `make run` and `make test` are the README's two commands.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint typecheck unit generate clean

$(STAMP): pyproject.toml sandbox/pyproject.toml trainer-image/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,trainer,jax]' -e ./sandbox -e ./trainer-image
	touch $(STAMP)

venv: $(STAMP)

# The main job on an embedded default: no GKE account needed.
run: $(STAMP)
	$(BIN)/tpujob run examples/digits-local.yaml --local

lint: $(STAMP)
	$(BIN)/ruff check operator sandbox trainer-image tests scripts bench
	$(BIN)/ruff format --check operator sandbox trainer-image tests scripts bench
	$(BIN)/lint-imports

# mypy --strict over what pyproject.toml names: the operator, its test bed, the trainer, bench/ and scripts/.
typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Everything CI proves: lint, types, and every test (unit, e2e on the test bed, trainer, chart).
test: lint typecheck
	$(BIN)/pytest -q -ra

# Generated files: the CRD and the chart's copy of it (tests/unit/test_generated.py checks drift); the chart's
# RBAC rules, CRD without CEL, values.schema.json and dashboard (tests/chart/test_chart.py checks drift).
generate: $(STAMP)
	$(BIN)/tpujob crd > crds/tpujob.dev_tpujobs.yaml
	mkdir -p charts/tpujob-operator/crds
	cp crds/tpujob.dev_tpujobs.yaml charts/tpujob-operator/crds/tpujob.dev_tpujobs.yaml
	$(BIN)/python scripts/generate_chart.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
