# twinfer: `make run` (set up, then the main job) and `make test` (set up, then all checks,
# the documentation site included).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export JAX_ENABLE_X64 := 1
export MPLBACKEND := Agg

.PHONY: run test accept bench peers reproduce setup lint imports typecheck docs pytest clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==26.3"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,docs]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/twinfer run chain4

test: $(STAMP) lint imports typecheck docs pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# The layer and independence contracts of DESIGN.md ([tool.importlinter] in pyproject.toml).
imports: $(STAMP)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/pyright

# The site (mkdocs.yml, docs/), warnings as errors. NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life
# banner (May 2027), not a build warning.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The run's compiled programs are kept in a new folder for the run only (tests/conftest.py), then removed.
pytest: $(STAMP)
	cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && \
	TWINFER_TEST_XLA_CACHE="$$cache" $(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=20

# Issues' acceptance checks at full size (minutes each; marked `acceptance`, left out of `make test`).
accept: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile -m acceptance --durations=20

bench: $(STAMP)
	$(BIN)/twinfer bench filters

# dynamax and cuthbert for `twinfer bench peers`, in their own environment (optional; dynamax sets JAX's
# matmul precision for its whole process, and nothing of twinfer's needs them).
PEERS_VENV := .venv-peers
$(PEERS_VENV)/.installed: requirements-peers.txt
	test -x $(PEERS_VENV)/bin/python || $(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade "pip==26.3"
	$(PEERS_VENV)/bin/python -m pip install --quiet -r requirements-peers.txt
	touch $@

peers: $(STAMP) $(PEERS_VENV)/.installed
	$(BIN)/twinfer bench peers --output bench-peers.json

# Every case at full size against the papers' tables (hours: PN-SMC, the PINN cases, bouncing-ball and
# the grid's big networks dominate); running it again resumes. Writes reproduction/REPRODUCTION.md.
reproduce: $(STAMP)
	$(BIN)/twinfer reproduce --out reproduction

clean:
	rm -rf $(VENV) $(PEERS_VENV) runs site reproduction
