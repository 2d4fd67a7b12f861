# Entry points for a fresh machine: `make run` serves the dashboard, `make test` runs the tests
# (all of them, as CI does; `make test-fast` is the inner loop while changing code).
# Both create .venv when it is missing, install the pinned requirements into it, then the project
# itself, editable (so the dashboard, the tests and every process a run spawns import it from this
# checkout without PYTHONPATH); a stamp file inside .venv makes the install a no-op until a
# requirements file or pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
PORT ?= 8501
ARGS ?=
PIP := $(VENV)/bin/python -m pip --disable-pip-version-check
# setuptools is pinned in requirements.txt, so the editable install builds with it, offline.
INSTALL_PROJECT := $(PIP) install --quiet --progress-bar off --no-build-isolation --no-deps -e .

# The virtual engine's compiled build (emulator/virtual/accel.py): rebuilt when a compiled source
# changed (its manifest knows which). A failed build (no C compiler) is reported and skipped: the
# interpreted engine runs the same code.

# The fast tier: no test that needs root or a browser, starts a process (`live`: a worker, relay,
# broker, streamlit, Ray or CLI child; tests/conftest.py marks them) or is `slow`; under 2 minutes
# on 2 cores. --forbid-processes fails a selected test that starts a process anyway. It does not
# build accel (a stale build runs interpreted), so an edit to the engine does not wait for mypyc.
FAST := -m "not (root or browser or gpu or netem or slow or live)" --forbid-processes

.PHONY: run test test-fast bench install install-dev accel

run: $(VENV)/.installed accel
	$(VENV)/bin/streamlit run app/Home.py --server.address 127.0.0.1 --server.port $(PORT) \
		--browser.gatherUsageStats false --server.headless true

test: $(VENV)/.installed-dev accel
	$(VENV)/bin/python -m pytest $(ARGS)

test-fast: $(VENV)/.installed-dev
	$(VENV)/bin/python -m pytest $(FAST) $(ARGS)

bench: $(VENV)/.installed
	$(VENV)/bin/python -m model_stub bench --quick

accel: $(VENV)/.installed
	-$(VENV)/bin/python -m emulator accel ensure

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet --progress-bar off -r requirements.txt
	$(INSTALL_PROJECT)
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet --progress-bar off -r requirements-dev.txt
	$(INSTALL_PROJECT)
	touch $@ $(VENV)/.installed
