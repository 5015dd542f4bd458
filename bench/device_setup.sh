#!/usr/bin/env bash
# On a lent GPU machine (torch and triton preinstalled, no network), sourced so that its
# PYTHONPATH stays: the wheels kdsl needs
# that the image lacks (carried in .whl/), then kdsl itself, editable, without its deps.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null
