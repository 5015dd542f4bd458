"""Coverage of the declared domain: whatever ``max_case_elements`` says, every spec is
checked at the upper end of each test range and domain, for each dtype; a kernel wrong
only there (softmax above N=4096, a bag of more than 110 rows) fails correctness."""
from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import pytest

import fake_backend
from fake_backend import QUICK, SOFTMAX, load
from kdsl import cases, ir, spec
from kdsl.search.candidate import Candidate
from kdsl.search.eval import evaluator, plan
from kdsl.search.jobs import EvalJob
from kdsl.sizes import evaluate, ranges

fake_backend.register()

LIBRARY = {p.stem: spec.load(p).ops[0] for p in sorted(spec.library_dir().glob("*.kspec"))}
TINY = dataclasses.replace(QUICK, dtypes=None, max_case_elements=64)  # the old plan: nothing big


def _upper(planned):
    return [p for p in planned if p.shape.label in cases.UPPER_LABELS]


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_every_range_reaches_its_maximum_in_each_dtype(name):
    op = LIBRARY[name]
    planned = plan.plan(op, TINY)
    for dt in op.dtype_choices:
        mine = [p.shape.sizes for p in _upper(planned) if p.shape.dtype == dt]
        for d, (lo, hi) in ranges(op).items():
            assert any(s[d] == hi for s in mine), (name, dt, d, hi)
    # moderate: the others small, so no case is expensive (hash_bucketize's N=100000 is
    # the largest, at 200,000 elements); every dim large at once within a million
    assert all(plan.elements(op, p.shape.sizes) <= 200_000 for p in _upper(planned)
               if p.shape.label != "all")
    assert all(plan.elements(op, p.shape.sizes) <= cases.ALL_CASE_ELEMENTS
               for p in _upper(planned))
    # where the kernel runs in the Triton interpreter, the every-dim case is left out
    assert not any(p.shape.label == "all" for p in plan.plan(op, TINY, interpreted=True))
    # and the cases under the limit are still planned as before
    assert all(plan.elements(op, p.shape.sizes) <= 64 for p in planned
               if p.shape.label not in cases.UPPER_LABELS)


@pytest.mark.parametrize("name", ["embedding_bag_sum", "jagged_softmax", "jagged_to_padded_dense"])
def test_jagged_specs_get_one_segment_spanning_the_longest_total(name):
    op = LIBRARY[name]
    offsets = next(t for t in op.inputs if isinstance(t.domain, ir.Offsets))
    total = offsets.domain.total
    longest = [p for p in plan.plan(op, TINY) if p.shape.label == "longest"]
    assert {p.shape.dtype for p in longest} == set(op.dtype_choices)
    for p in longest:
        c = cases.draw(op, p.shape, p.seed)
        hi = ranges(op)[total.name][1]
        assert c.sizes[total.name] == hi
        assert np.diff(c.inputs[offsets.name]).max() == hi  # one segment holds all of it


def test_index_domains_reach_their_largest_value():
    op = LIBRARY["embedding_bag_sum"]
    for p in _upper(plan.plan(op, TINY)):
        c = cases.draw(op, p.shape, p.seed)
        if c.sizes["L"]:  # the largest index last, the least first
            assert c.inputs["idx"][-1] == c.sizes["V"] - 1, c.sizes
            assert c.inputs["idx"][0] == (0 if c.sizes["L"] > 1 else c.sizes["V"] - 1)
    assert any(p.shape.sizes["V"] == 1000 and p.shape.sizes["L"] == 2000
               for p in _upper(plan.plan(op, TINY)))
    ce = LIBRARY["cross_entropy"]
    top = [cases.draw(ce, p.shape, p.seed) for p in _upper(plan.plan(ce, TINY))
           if p.shape.sizes["C"] == 5000]
    assert top and all(c.inputs["target"].max() == 4999 for c in top)


def test_integers_without_a_domain_reach_their_type_extremes():
    op = LIBRARY["hash_bucketize"]
    seen = np.concatenate([cases.draw(op, p.shape, p.seed).inputs["ids"]
                           for p in _upper(plan.plan(op, TINY))])
    assert seen.min() == np.iinfo(np.int64).min and seen.max() == np.iinfo(np.int64).max


def test_upper_cases_do_not_repeat_a_planned_shape():
    op = LIBRARY["softmax"]
    keys = [(tuple(p.shape.sizes.items()), p.shape.dtype) for p in plan.plan(op, QUICK)]
    assert len(keys) == len(set(keys))


# ---- kernels wrong only at the upper ends: rejected now ---------------------------

def _evaluate(op, source: str, config=QUICK):
    candidate = Candidate.of("fakepy", {}, textwrap.dedent(source))
    return evaluator.evaluate(EvalJob(op, candidate, config))


def test_a_softmax_wrong_only_above_n_4096_is_rejected(monkeypatch):
    op = load("softmax")
    wrong = SOFTMAX.replace("e / e.sum(", "e / (1 + (sizes['N'] > 4096)) / e.sum(")
    # no case within QUICK's 4096 elements reaches N > 4096; only the upper ends do
    assert not any(p.shape.sizes["N"] > 4096 for p in plan.plan(op, QUICK)
                   if p.shape.label not in cases.UPPER_LABELS)
    r = _evaluate(op, wrong)
    assert r.stage == "correctness" and not r.ok
    assert "N=5000" in r.message and "upper" in r.message, r.message
    assert _evaluate(op, SOFTMAX).ok  # the same kernel without the fault passes
    monkeypatch.setattr(plan, "upper_shapes", lambda *a: [])
    assert _evaluate(op, wrong).ok  # what the plan without upper ends let through


BAG = '''
import numpy as np
import torch


def kernel(inputs, outputs, sizes):
    table = inputs["table"].double().numpy()
    idx, off = inputs["idx"].numpy(), inputs["offsets"].numpy()
    y = np.zeros((sizes["B"], sizes["D"]))
    for b in range(sizes["B"]):
        rows = idx[off[b]:off[b + 1]][:LIMIT]  # a fixed-size buffer of LIMIT rows
        y[b] = table[rows].sum(axis=0)
    outputs["y"].copy_(torch.from_numpy(y))
'''


def test_a_bag_kernel_wrong_only_past_110_rows_is_rejected(monkeypatch):
    op = load("embedding_bag_sum")
    config = dataclasses.replace(QUICK, max_case_elements=1 << 20, cases_per_dtype=3)
    assert _evaluate(op, BAG.replace("LIMIT", "100000"), config).ok
    r = _evaluate(op, BAG.replace("LIMIT", "110"), config)
    assert r.stage == "correctness" and "longest" in r.message, r.message
    monkeypatch.setattr(plan, "upper_shapes", lambda *a: [])
    assert _evaluate(op, BAG.replace("LIMIT", "110"), config).ok  # passed before


def test_a_spec_whose_every_case_is_large_is_checked_at_its_smallest():
    # an imported module's weights are fixed (8192 x 8192): no case fits the budget, and
    # the smallest is checked rather than none
    op = spec.parse_text(textwrap.dedent("""
        op fixed_linear
          dims B
          in  w: f32 [3000, 3000]
          in  x: f32 [B, 3000]
          out y: f32 [B, 3000]
          y[b, o] = sum(k) x[b, k] * w[o, k]
          baseline x @ w.T
          tolerance f32(rtol=1e-3, atol=1e-3)
          test  B in 2..4
          bench B=8
        """), "t.kspec").ops[0]
    planned = plan.plan(op, QUICK)
    assert [(p.shape.sizes, p.shape.dtype) for p in planned] == [({"B": 2}, "f32")]
