# The README's two commands: `make demo` (quickstart training run) and `make test` (the whole suite).
# Both create or refresh the local .venv from the pinned versions in pyproject.toml.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: venv
	$(VENV)/bin/fccolit fit --config configs/quickstart.yaml

test: venv
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The LibAUC comparisons need LibAUC itself, a benchmark-only dependency: its import needs only packages the
# dev extra already has, so it goes in without its own (heavy, optional) requirements.
bench: venv
	$(VENV)/bin/python -m pip install --quiet --no-deps libauc==2.0.1
	$(VENV)/bin/python benchmarks/run.py --quick

clean:
	rm -rf $(VENV) lightning_logs
