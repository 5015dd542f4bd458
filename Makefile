PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: install demo test clean

install: $(STAMP)

# Torch goes in first, pinned, so pip takes the local CPU wheel instead of a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,ray]'
	touch $(STAMP)

# The main job on the embedded defaults: check the library, then a short search
# (c backend, mcts, CPU, no API key needed); it prints where the run and best kernel are.
demo: install
	$(BIN)/kdsl check specs/*.kspec
	$(BIN)/kdsl search specs/rmsnorm.kspec --budget 12 --workers 2

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
