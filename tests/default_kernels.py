"""Test support: a backend's default kernel for an op, through the judge's correctness stage
(what ``kdsl eval --no-time`` runs), on the CPU."""
from __future__ import annotations

from kdsl.backends import get
from kdsl.search.eval import correctness
from kdsl.search.jobs import EvalConfig


def assert_default_kernel_correct(op, backend: str, cases_per_dtype: int = 3,
                                  genome: dict | None = None) -> None:
    be = get(backend)
    built = be.build(op, be.render(op, genome or be.space(op, "cpu").default(), "cpu"), "cpu")
    outcome = correctness.check(op, built.fn, EvalConfig(seeds=(1,), time=False,
                                                         cases_per_dtype=cases_per_dtype))
    assert outcome.message is None, f"{backend}: {outcome.message}"
