# Two entry points: `make demo` (the main job: zoo table, one summary, the digits example with its Hub round trip) and `make test` (the suite; CI runs it via .ci/run).
# `make check` runs the code checks (ruff lint and format, mypy; configured in pyproject.toml); `make test` runs them, then the suite.
# `make test-fast` runs the suite without the tests marked slow (pytest.mark.slow in the test files), for the edit-test loop.
# `make test-min` runs that same set in a second environment (.venv-min) holding the oldest versions pyproject.toml allows.
# Each creates its environment on first use: .venv with the pinned working set (constraints.txt), .venv-min with
# every floor pinned (.ci/floors.py).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pytest-xdist workers (each file's tests run in one of them, the longest files first: tests/conftest.py);
# WORKERS=0 runs the suite in this process
WORKERS ?= 2
# FULL=1 runs the full sweep (every zoo row in the per-row tests, every fuzz case, every model in timm's suite; as CI
# does): the default runs a representative subset of those (docs/install.md#running-the-tests)
FULL ?=
export VITSCRATCH_FULL_SWEEP := $(if $(FULL),1,$(VITSCRATCH_FULL_SWEEP))
# pytest options for the test targets: the 15 slowest tests are named at the end; PYTEST_ARGS=-v names each test as it ends
XDIST := $(if $(filter 0,$(WORKERS)),,--dist loadfile --no-loadscope-reorder)
PYTEST := -n $(WORKERS) $(XDIST) --durations=15 $(PYTEST_ARGS)
STAMP := $(VENV)/.installed-stamp
MIN_VENV ?= .venv-min
MIN_BIN := $(MIN_VENV)/bin
MIN_STAMP := $(MIN_VENV)/.installed-stamp

.PHONY: demo check test test-fast test-min clean

# the dev extra holds every other extra (plots, examples, transformers), the test tools and the code checks
$(STAMP): pyproject.toml constraints.txt
	@echo "installing the package and its pinned working set (constraints.txt) into $(VENV)/: first use only, a few minutes (torch is the large download)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

$(MIN_STAMP): pyproject.toml constraints.txt .ci/floors.py
	test -x $(MIN_BIN)/python || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_BIN)/python .ci/floors.py > $(MIN_VENV)/floors.txt
	$(MIN_BIN)/python -m pip install --quiet -c $(MIN_VENV)/floors.txt -e '.[dev]'
	touch $(MIN_STAMP)

demo: $(STAMP)
	$(BIN)/vitscratch list
	@echo
	$(BIN)/vitscratch summary scratch_vit_b16 --num-classes 5
	@echo
	$(BIN)/python -m examples.digits

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: check
	$(BIN)/python -m pytest $(PYTEST)

test-fast: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST) -m "not slow"

test-min: $(MIN_STAMP)
	$(MIN_BIN)/python .ci/floors.py --installed
	$(MIN_BIN)/python -m pytest $(PYTEST) -m "not slow"

clean:
	rm -rf $(VENV) $(MIN_VENV) build *.egg-info
