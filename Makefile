# Every target creates .venv when it is missing and installs what it needs, saying so.
PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# The image the manifests in deploy/ and the chart's values name.
IMAGE   ?= ghcr.io/gpufleet/gpufleet:$(VERSION)

.PHONY: demo test lint bench image venv clean

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	@echo "make: installing gpufleet and its development tools into $(VENV) (pip install -e '.[dev]'; the first"
	@echo "      time takes a minute or two: numpy, grpcio, matplotlib, playwright, ...)"
	$(BIN)/pip install -q --progress-bar off -e '.[dev]'
	@touch $(STAMP)
	@echo "make: $(VENV) is ready"

venv: $(STAMP)

demo: $(STAMP)
	@echo "make: gpufleet demo (the case study calibrated to the guide's published before and its attribution of"
	@echo "      failures, then its after; under a minute)"
	$(BIN)/gpufleet demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(STAMP)
	@echo "make: every benchmark under bench/, one after the other: about 40 minutes on 2 cores, nearly all of it"
	@echo "      bench/fragmentation.py (770 runs; figures and times: bench/README.md)"
	$(BIN)/python bench/run_all.py

image:
	@command -v docker >/dev/null 2>&1 || { echo "make image: docker is not installed; the image is built by"\
	  "the Dockerfile with 'docker build -t $(IMAGE) .'" >&2; exit 1; }
	docker build --build-arg SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) -t $(IMAGE) .

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
