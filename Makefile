# The two commands a new user runs: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV   ?= .venv
# torch first, pinned to the CPU wheel; override e.g. TORCH="torch==2.13.0+cu126" on a GPU box.
TORCH  ?= torch==2.13.0
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.rlsweep-installed

.PHONY: install demo test test-slow test-all lint type bench corpus clean browser

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test,lint,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/rlsweep run conf/sweeps/quickstart.yaml

# Two tiers: `make test` is everything but the tests marked slow (a few minutes on 2 cores: unit
# and contract tests on both backends, quick sweeps with real MLflow, Optuna and Ray); `make
# test-slow` is the slow ones (the reports' reproductions trained to their verdicts, whole Ray
# sweeps and a Ray cluster losing and gaining nodes, an MLflow server outage, repair end to end;
# about 14 minutes). Both run in TEST_WORKERS processes (pytest-xdist), a test file to a process at
# a time. CI (.ci/run) runs both; `make test-all` runs them as one session, in one process.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadfile
test: install
	$(PY) -m pytest -q -m "not slow" $(XDIST)

test-slow: install
	$(PY) -m pytest -q -m slow $(XDIST)

test-all: install
	$(PY) -m pytest -q

# ruff (rules in pyproject.toml: E, F, I, B, UP and S) and mypy on stability/ and the engine of sweeps/
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

type: install
	$(VENV)/bin/mypy

# Headless Chromium for the MLflow UI test (Debian package; changes the system, so `make test`
# never runs it). Without it that one test is skipped and says how to get it.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium for the browser test"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  ( $$SUDO apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    ( $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO apt-get install -y -qq chromium >/dev/null 2>&1 ) ) || \
	  echo "chromium could not be installed: the browser test will be skipped"; }

bench: install
	$(PY) tests/bench/run.py --repeat 2

# The labelled failure corpus (conf/corpus): every case in cases.yaml x 3 seeds, some 15 minutes per 75-run split on 2 cores;
# finished runs are kept in results/corpus, so it resumes. `make bench` runs it too, then scores it.
corpus: install
	$(PY) tests/bench/corpus/run.py --jobs 2
	$(PY) tests/bench/corpus/report.py

clean:
	rm -rf $(VENV) results/*/ results/mlflow.db
