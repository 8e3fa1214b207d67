# The README's two commands:   make run    (install + the main job)   and   make test   (install + tests)
# make docs builds the documentation site (site/) with --strict: a broken link or reference fails it.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Torch is installed first, on its own, so that `pip install -e .` finds `torch>=2.4` satisfied and
# never pulls a multi-GB CUDA build. Here `torch==2.13.0` is a CPU wheel on local disk; elsewhere,
# override: `make run TORCH_SPEC=torch TORCH_INDEX=https://download.pytorch.org/whl/cpu` (or cu12x).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
OUT ?= out

.PHONY: run test test-slow bench docs pages env env-test clean

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	touch $@

$(VENV)/.env: $(VENV)/.torch pyproject.toml
	$(PIP) install -q -e .
	touch $@

$(VENV)/.env-test: $(VENV)/.torch pyproject.toml
	$(PIP) install -q -e ".[test,bench,ray,pyvene,hf]"
	touch $@

$(VENV)/.env-docs: $(VENV)/.torch pyproject.toml
	$(PIP) install -q -e ".[docs]"
	touch $@

env: $(VENV)/.env
env-test: $(VENV)/.env-test

run: $(VENV)/.env
	$(VENV)/bin/mecheval data show ar --n 1 --set n_pairs=8 --set n_keys=64 --set n_values=64
	$(VENV)/bin/mecheval study quick --out $(OUT)/quick

test: $(VENV)/.env-test
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  echo "note: Chromium not found, so the browser tests (tests/study/test_report_browser.py) will be SKIPPED;" \
	       "install it (apt-get install chromium, as .ci/run does) to run them"
	$(PY) -m pytest -n 2 -m "not slow" -q

test-slow: $(VENV)/.env-test
	$(PY) -m pytest -n 2 -m slow -q

bench: $(VENV)/.env-test
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

docs: $(VENV)/.env-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Regenerates the README's and docs' tables of committed results and the study figure from results/
# (tools/pages: repository tooling, not part of the installed package).
pages: $(VENV)/.env
	PYTHONPATH=tools $(PY) -m pages .

clean:
	rm -rf $(VENV) $(OUT) site
