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

# The README's commands run `grandbo` as is: link it into a folder on PATH (~/.local/bin, else
# /usr/local/bin), or say how to reach it.
link: $(VENV)/.installed
	@for dir in "$$HOME/.local/bin" /usr/local/bin; do \
	  case ":$$PATH:" in *":$$dir:"*) \
	    if mkdir -p "$$dir" 2>/dev/null && [ -w "$$dir" ]; then \
	      ln -sf "$(CURDIR)/$(BIN)/grandbo" "$$dir/grandbo" && exit 0; \
	    fi;; \
	  esac; \
	done; \
	echo "note: no writable folder on PATH for grandbo; run $(CURDIR)/$(BIN)/grandbo or activate $(VENV)"

# torch is installed first and pinned to the CPU build so that nothing pulls a CUDA build; it is
# used once, by `grandbo models prepare`, and never imported at query time.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev,postgres,bedrock,prepare]"
	touch $@

$(MODEL): $(VENV)/.installed
	$(BIN)/grandbo models prepare

# The console's browser tests drive Debian's Chromium through Playwright (whose own browser download cannot
# run everywhere) and check each page with axe-core from npm, kept in .browser/ (not committed). Both
# Chromium and npm come from apt when missing (as root, else through sudo), so a fresh Debian needs nothing else.
APT_INSTALL = if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1); \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1); fi
AXE := .browser/node_modules/axe-core/axe.min.js
browser: $(AXE)
	@if [ ! -x /usr/bin/chromium ]; then $(call APT_INSTALL,chromium); fi

$(AXE):
	@if ! command -v npm >/dev/null 2>&1; then $(call APT_INSTALL,npm); fi
	npm install --prefix .browser --no-audit --no-fund --silent axe-core@4.14

demo: setup
	$(BIN)/grandbo demo

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
