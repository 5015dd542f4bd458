"""``specs/forms/``: ordinary torch ops written as the math reads, each a form the lowering
once refused or ran at a fraction of torch's speed (a decayed sum, a running log-sum-exp, a
rounding, a product of three reads, a strided convolution only reduced, reads of a prefix of
an input). Each one's default kernel on the c and numpy backends is correct on its test
cases (``kdsl check`` holds each baseline to the reference). Their timings are
``bench/forms.py``'s."""
from __future__ import annotations

from pathlib import Path

import pytest

from default_kernels import assert_default_kernel_correct
from kdsl import spec

FORMS = Path(__file__).resolve().parent.parent / "specs" / "forms"
PATHS = sorted(FORMS.glob("*.kspec"))


def test_the_forms_are_there():
    assert len(PATHS) >= 7


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_a_forms_default_kernel_is_correct(path, backend):
    op, = spec.load(path).ops
    assert_default_kernel_correct(op, backend, cases_per_dtype=2)
