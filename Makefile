# The README's two commands: `make demo` (quickstart training run) and `make test` (the whole suite).
# Both create or refresh the local .venv with the exact versions of constraints.txt; pyproject.toml declares only
# the ranges a pip user gets. `make constraints` rewrites constraints.txt from the .venv after an upgrade there.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# pip, then setuptools (the build backend) at their pinned versions; the package is then built without build
# isolation, by that setuptools, so that nothing in the environment floats.
PIP := $(VENV)/bin/python -m pip install --quiet --constraint constraints.txt

.PHONY: venv demo test bench wheel constraints clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip setuptools
	$(PIP) --no-build-isolation -e ".[dev,clip,sweep]"
	touch $(STAMP)

demo: venv
	$(VENV)/bin/fccolit fit --config configs/quickstart.yaml

test: venv
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The LibAUC comparisons need LibAUC itself, a benchmark-only dependency: its import needs only packages the
# dev extra already has, so it goes in without its own (heavy, optional) requirements.
bench: venv
	$(PIP) --no-deps libauc
	$(VENV)/bin/python benchmarks/run.py --quick

# dist/fccolit-<version>-py3-none-any.whl: `pip install` it anywhere (the configs ship inside it).
wheel: venv
	$(VENV)/bin/python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .

constraints:
	{ echo "# The exact versions that \`make venv\` installs (pip install -c constraints.txt): the environment the"; \
	  echo "# tests pass in. pyproject.toml declares ranges. Written by \`make constraints\` from .venv."; \
	  $(VENV)/bin/python -m pip freeze --all --exclude-editable; } > constraints.txt

clean:
	rm -rf $(VENV) lightning_logs build dist
