# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
# Python compiles what it imports once and keeps it (pip installs without compiling: --no-compile),
# even where the environment says not to write bytecode.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

$(STAMP): pyproject.toml setup.py src/dtrlab/sim/_cengine.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# --no-compile: Python compiles what it imports when it first imports it, not all of torch up front
	$(PY) -m pip install -q --no-compile -e '.[dev,capture]'
	touch $(STAMP)

.PHONY: install test test-fast demo bench clean
install: $(STAMP)

# On a process a core, up to four, each test file on one (its shared fixtures are made once).
test: $(STAMP)
	$(PY) -m pytest -n auto --maxprocesses 4 --dist loadfile

# Everything but the tests marked slow (over ~0.5 s, or behind a fixture that is): the tier to run while working.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

demo: $(STAMP)
	$(VENV)/bin/dtrlab reproduce --out demo-out

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build src/*.egg-info
