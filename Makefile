# twinfer: `make run` (set up, then the main job) and `make test` (set up, then all checks).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export JAX_ENABLE_X64 := 1
export MPLBACKEND := Agg

.PHONY: run test bench setup lint typecheck pytest clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==26.3"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/twinfer run chain4

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: $(STAMP)
	$(BIN)/pyright

pytest: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/twinfer bench filters

clean:
	rm -rf $(VENV) runs
