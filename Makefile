# Two entry points: `make demo` (the main job: zoo table, one summary, the digits example with its Hub round trip) and `make test` (the suite; CI runs it via .ci/run).
# `make check` runs the code checks (ruff lint and format, mypy; configured in pyproject.toml); `make test` runs them, then the suite.
# `make test-fast` runs the suite without the tests marked slow (tests/conftest.py: SLOW), for the edit-test loop.
# Each creates .venv on first use and installs the package with the pinned working set.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pytest-xdist workers (each file's tests run in one of them); WORKERS=0 runs the suite in this process
WORKERS ?= 2
STAMP := $(VENV)/.installed-stamp

.PHONY: demo check test test-fast clean

$(STAMP): pyproject.toml constraints.txt
	@echo "installing the package and its pinned working set (constraints.txt) into $(VENV)/: first use only, a few minutes (torch is the large download)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,examples]'
	touch $(STAMP)

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
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info
