# The two commands a new user runs: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV   ?= .venv
# torch first, pinned to the CPU wheel; override e.g. TORCH="torch==2.13.0+cu126" on a GPU box.
TORCH  ?= torch==2.13.0
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.rlsweep-installed

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/rlsweep run conf/sweeps/quickstart.yaml

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) tests/bench/run.py --repeat 2

clean:
	rm -rf $(VENV) results/*/ results/mlflow.db
