PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: install demo test wheel-test clean

install: $(STAMP)

# Torch goes in first, pinned, so pip takes the local CPU wheel instead of a CUDA build.
# The tests need every extra (triton, llm, plot) and ray. The distribution was called kdsl
# before: a .venv made then loses the old name's metadata and script.
$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip uninstall -q -y kdsl 2>/dev/null || true
	$(BIN)/pip install -q -e '.[dev,ray,all]'
	touch $(STAMP)

# The main job on the embedded defaults: check the library, then a short search
# (c backend, mcts, CPU, no API key needed); it prints where the run and best kernel are.
demo: install
	$(BIN)/kdsl check specs/*.kspec
	$(BIN)/kdsl search specs/rmsnorm.kspec --budget 12 --workers 2

# The wheel first (about 2 minutes), so that pytest's summary is the last line.
test: install wheel-test
	$(BIN)/python -m pytest -q

# Build the wheel, install it with no extras into a fresh virtualenv, run check and a search.
wheel-test:
	PY=$(PY) bash .ci/wheel

clean:
	rm -rf $(VENV) build *.egg-info
