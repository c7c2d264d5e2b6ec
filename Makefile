# fabreg: the two commands of the README are `make run` and `make test`.
# Both install only what is missing (system packages, then the .venv), so they can be repeated.

VENV        ?= .venv
PYTHON      ?= python3
RFM_FLAGS   ?=
PYTEST_FLAGS ?=
# Processes for the tests that measure nothing (pytest-xdist: one per core); the slow tests,
# which measure real MPI jobs and ReFrame sessions, run one at a time after them. (Exit status
# 5: PYTEST_FLAGS chose no test of one kind.)
TEST_WORKERS ?= auto
STAMP       := $(VENV)/.fabreg-installed

.PHONY: run test test-fast setup deps-run deps-test venv lint clean

run: deps-run venv
	$(VENV)/bin/reframe -C reframe-config.py -c checks/ -r $(RFM_FLAGS)

test: deps-test venv
	$(VENV)/bin/pytest -m "not slow and not cluster" -n $(TEST_WORKERS) $(PYTEST_FLAGS) || [ $$? -eq 5 ]
	$(VENV)/bin/pytest -m "slow or cluster" $(PYTEST_FLAGS) || [ $$? -eq 5 ]

# For quick iteration: no emulated cluster, no ReFrame sessions, no real MPI jobs.
test-fast: venv
	$(VENV)/bin/pytest -m "not slow and not cluster" -n $(TEST_WORKERS) $(PYTEST_FLAGS)

setup: deps-test venv

deps-run:
	@ci/install-deps.sh run

deps-test:
	@ci/install-deps.sh test

venv: $(STAMP)

$(STAMP): pyproject.toml
	@echo "fabreg: creating $(VENV) (ReFrame 4.10 and fabreg)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[checks,test]'
	@touch $@

lint: venv
	$(VENV)/bin/ruff check src tests checks ci

clean:
	rm -rf stage output report
