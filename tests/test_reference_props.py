"""The reference interpreter against an independent numpy (or plain Python) formulation
of every op in the library, on small sizes drawn by hypothesis and inputs drawn by
``kdsl.cases.draw`` (so domains, duplicate keys and empty segments all occur)."""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdsl import cases, spec
from kdsl.reference import reference
from kdsl.sizes import shape_of, valid

SPECS = Path(__file__).resolve().parent.parent / "specs"
OPS = {p.stem: spec.load(p).ops[0] for p in sorted(SPECS.glob("*.kspec"))}
PROPS = settings(max_examples=25, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


# ---- independent formulations (float64 / int64, written from the specs' comments) ------

def _rowmax(x):
    return x.max(axis=-1, keepdims=True)


def softmax(s, x):
    e = np.exp(x - _rowmax(x))
    return {"y": e / e.sum(axis=-1, keepdims=True)}


def log_softmax(s, x):
    z = x - _rowmax(x)
    return {"y": z - np.log(np.exp(z).sum(axis=-1, keepdims=True))}


def layernorm(s, x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return {"y": (x - mu) / np.sqrt(var + 1e-5) * w + b}


def rmsnorm(s, x, w):
    return {"y": x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w}


def swiglu(s, a, b):
    return {"y": a / (1.0 + np.exp(-a)) * b}


def gelu_tanh(s, x):
    return {"y": 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))}


def matmul(s, a, b):
    return {"c": a @ b}


def matmul_bias_relu(s, a, w, bias):
    return {"y": np.maximum(a @ w + bias, 0.0)}


def embedding_bag_sum(s, table, idx, offsets):
    y = np.zeros((s["B"], s["D"]))
    for b in range(s["B"]):
        for i in range(offsets[b], offsets[b + 1]):
            y[b] += table[idx[i]]
    return {"y": y}


def jagged_to_padded_dense(s, values, offsets):
    y = np.zeros((s["B"], s["T"], s["D"]))
    for b in range(s["B"]):
        seg = values[offsets[b]:offsets[b + 1]][:s["T"]]
        y[b, :len(seg)] = seg
    return {"y": y}


def jagged_softmax(s, values, offsets):
    y = np.zeros_like(values)
    for b in range(s["B"]):
        lo, hi = offsets[b], offsets[b + 1]
        if hi > lo:
            seg = values[lo:hi]
            e = np.exp(seg - seg.max(axis=0))
            y[lo:hi] = e / e.sum(axis=0)
    return {"y": y}


def dlrm_interaction(s, x):
    pairs = list(itertools.combinations(range(s["F"]), 2))
    y = np.array([[x[b, r] @ x[b, c] for r, c in pairs] for b in range(s["B"])])
    return {"y": y.reshape(s["B"], len(pairs))}


def sort_rows(s, x):
    return {"y": np.array([sorted(row) for row in x.tolist()]).reshape(x.shape)}


def topk_rows(s, x):
    vals, idx = [], []
    for row in x.tolist():
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:s["K"]]
        idx.append(order)
        vals.append([row[j] for j in order])
    shape = (s["M"], s["K"])
    return {"vals": np.array(vals).reshape(shape), "idx": np.array(idx).reshape(shape)}


def cumsum_rows(s, x):
    return {"y": np.array([list(itertools.accumulate(row)) for row in x.tolist()]).reshape(x.shape)}


MASK = (1 << 64) - 1


def splitmix64(v: int) -> int:
    """The splitmix64 finalizer on Python ints, the result read back as a signed int64."""
    z = (v + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return z - (1 << 64) if z >> 63 else z


def hash_bucketize(s, ids):
    return {"y": np.array([splitmix64(int(v) & MASK) % s["NB"] for v in ids], dtype=np.int64)}


def cross_entropy(s, logits, target):
    out = []
    for row, t in zip(logits.tolist(), target.tolist()):
        m = max(row)
        out.append(m + math.log(sum(math.exp(v - m) for v in row)) - row[t])
    return {"loss": np.array(out)}


def max_pool1d(s, x):
    y = np.full((s["B"], s["C"], s["LO"]), -np.inf)
    for o in range(s["LO"]):
        for k in range(s["KW"]):
            p = o * s["S"] + k - s["P"]
            if 0 <= p < s["L"]:
                y[:, :, o] = np.maximum(y[:, :, o], x[:, :, p])
    return {"y": y}


def conv1d(s, x, w):
    y = np.zeros((s["B"], s["CO"], s["LO"]))
    for o in range(s["LO"]):
        for k in range(s["KW"]):
            p = o + k - s["P"]
            if 0 <= p < s["L"]:
                y[:, :, o] += x[:, :, p] @ w[:, :, k].T
    return {"y": y}


FORMULATIONS = {f.__name__: f for f in (
    softmax, log_softmax, layernorm, rmsnorm, swiglu, gelu_tanh, matmul, matmul_bias_relu,
    embedding_bag_sum, jagged_to_padded_dense, jagged_softmax, dlrm_interaction, sort_rows,
    topk_rows, cumsum_rows, hash_bucketize, cross_entropy, max_pool1d, conv1d)}


# ---- small sizes that satisfy each spec's conditions --------------------------------

def _rows(**hi):
    return st.fixed_dictionaries({k: st.integers(1, v) for k, v in hi.items()})


@st.composite
def _conv1d(draw):
    s = {"B": draw(st.integers(1, 2)), "CI": draw(st.integers(1, 3)),
         "CO": draw(st.integers(1, 3)), "L": draw(st.integers(1, 12)), "P": draw(st.integers(0, 3))}
    s["KW"] = draw(st.integers(1, min(7, s["L"] + 2 * s["P"])))
    s["LO"] = s["L"] + 2 * s["P"] - s["KW"] + 1
    return s


@st.composite
def _max_pool1d(draw):
    s = {"B": draw(st.integers(1, 2)), "C": draw(st.integers(1, 3)),
         "KW": draw(st.integers(1, 9)), "S": draw(st.integers(1, 4))}
    s["P"] = draw(st.integers(0, min(4, s["KW"] // 2)))
    s["L"] = draw(st.integers(max(1, s["KW"] - 2 * s["P"]), 20))
    s["LO"] = (s["L"] + 2 * s["P"] - s["KW"]) // s["S"] + 1
    return s


@st.composite
def _dlrm(draw):
    f = draw(st.integers(2, 6))
    return {"B": draw(st.integers(1, 3)), "F": f, "D": draw(st.integers(1, 5)),
            "P": f * (f - 1) // 2}


@st.composite
def _topk(draw):
    n = draw(st.integers(1, 12))
    return {"M": draw(st.integers(1, 4)), "N": n, "K": draw(st.integers(1, n))}


def _jagged(**extra):
    return st.fixed_dictionaries({"L": st.integers(0, 20), "D": st.integers(1, 4),
                                  "B": st.integers(1, 6), **extra})


SIZES = {
    "softmax": _rows(M=4, N=9), "log_softmax": _rows(M=4, N=9), "layernorm": _rows(M=4, N=9),
    "rmsnorm": _rows(M=4, N=9), "swiglu": _rows(M=4, N=9), "gelu_tanh": _rows(M=4, N=9),
    "cumsum_rows": _rows(M=4, N=9), "sort_rows": _rows(M=4, N=12),
    "cross_entropy": _rows(M=4, C=9),
    "matmul": _rows(M=4, N=4, K=5), "matmul_bias_relu": _rows(M=4, N=4, K=5),
    "embedding_bag_sum": st.fixed_dictionaries({"V": st.integers(1, 10), "D": st.integers(1, 4),
                                                "B": st.integers(1, 6), "L": st.integers(0, 20)}),
    "jagged_to_padded_dense": _jagged(T=st.integers(1, 6)),
    "jagged_softmax": _jagged(),
    "dlrm_interaction": _dlrm(), "topk_rows": _topk(),
    "hash_bucketize": st.fixed_dictionaries({"N": st.integers(0, 40),
                                             "NB": st.sampled_from([1, 2, 7, 1000, 1000003])}),
    "max_pool1d": _max_pool1d(), "conv1d": _conv1d(),
}


def test_every_library_op_has_a_formulation():
    assert set(OPS) == set(FORMULATIONS) == set(SIZES)
    assert len(OPS) == 19


@st.composite
def instances(draw, name):
    op = OPS[name]
    sizes = draw(SIZES[name])
    assert valid(op, sizes), sizes
    dtype = draw(st.sampled_from(op.dtype_choices))
    label = draw(st.sampled_from(["random", "duplicates", "segments", "edge"]))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return cases.draw(op, cases.Shape(sizes, dtype, label, draw(st.integers(0, 7))), seed)


@pytest.mark.parametrize("name", sorted(OPS))
@PROPS
@given(data=st.data())
def test_reference_matches_independent_formulation(name, data):
    op = OPS[name]
    case = data.draw(instances(name))
    inputs = {t.name: case.inputs[t.name] for t in op.inputs}
    got = reference(op, case.sizes, inputs)
    want = FORMULATIONS[name](case.sizes, *(np.asarray(inputs[t.name]).astype(
        np.float64 if inputs[t.name].dtype.kind == "f" else np.int64) for t in op.inputs))
    assert set(got) == {t.name for t in op.outputs}
    for t in op.outputs:
        g, w = got[t.name], np.asarray(want[t.name])
        assert g.shape == shape_of(op, t.name, case.sizes)
        assert g.shape == w.shape
        if g.dtype.kind in "iub":
            assert g.dtype == np.int64
            np.testing.assert_array_equal(g, w.astype(np.int64))
        else:
            assert g.dtype == np.float64
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)


def test_reference_does_not_modify_inputs():
    for name, op in OPS.items():
        shape = cases.shapes(op, seed=3, per_dtype=1)[0]
        case = cases.draw(op, shape, 3)
        if sum(a.size for a in case.inputs.values()) > 200_000:
            continue
        before = {k: v.copy() for k, v in case.inputs.items()}
        reference(op, case.sizes, case.inputs)
        for k, v in case.inputs.items():
            np.testing.assert_array_equal(v, before[k], err_msg=f"{name}: {k}")


def test_splitmix64_known_values():
    """The finalizer's published outputs for the first splitmix64 states from seed 0."""
    golden = 0x9E3779B97F4A7C15
    assert splitmix64(0) & MASK == 0xE220A8397B1DCDAF
    assert splitmix64(golden) & MASK == 0x6E789E6AA1B965F4
    assert splitmix64(2 * golden & MASK) & MASK == 0x06C45D188009454F


def test_hash_bucketize_extremes():
    op = OPS["hash_bucketize"]
    ids = np.array([0, 1, -1, 2 ** 63 - 1, -2 ** 63, 123456789], dtype=np.int64)
    sizes = {"N": len(ids), "NB": 1000003}
    got = reference(op, sizes, {"ids": ids})["y"]
    assert got.tolist() == hash_bucketize(sizes, ids)["y"].tolist()
    assert (got >= 0).all() and (got < 1000003).all()


def test_empty_rows_and_segments():
    bag = OPS["embedding_bag_sum"]
    sizes = {"V": 3, "D": 2, "B": 3, "L": 2}
    inputs = {"table": np.arange(6.0).reshape(3, 2), "idx": np.array([2, 0]),
              "offsets": np.array([0, 0, 2, 2])}
    np.testing.assert_array_equal(reference(bag, sizes, inputs)["y"],
                                  [[0, 0], [4 + 0, 5 + 1], [0, 0]])
    hb = OPS["hash_bucketize"]
    assert reference(hb, {"N": 0, "NB": 5}, {"ids": np.zeros(0, np.int64)})["y"].shape == (0,)
    js = OPS["jagged_softmax"]
    out = reference(js, {"L": 0, "D": 2, "B": 2},
                    {"values": np.zeros((0, 2)), "offsets": np.zeros(3, np.int64)})["y"]
    assert out.shape == (0, 2)


def test_topk_ties_take_the_lowest_index_first():
    op = OPS["topk_rows"]
    x = np.array([[1, 3, 3, 2, 3]], dtype=np.int64)
    out = reference(op, {"M": 1, "N": 5, "K": 3}, {"x": x})
    assert out["vals"].tolist() == [[3, 3, 3]]
    assert out["idx"].tolist() == [[1, 2, 4]]
    out = reference(op, {"M": 1, "N": 5, "K": 2},
                    {"x": np.array([[-2 ** 63, 2 ** 63 - 1, 0, -1, 2 ** 63 - 1]])})
    assert out["idx"].tolist() == [[1, 4]]


# ---- regressions: shapes and dtypes at the edges --------------------------------------

SCALARS = """\
op scalars
  dims N
  in  x: f32 [N]
  out t: f32 []
  out c: i64 []
  t[] = sum(i) x[i]
  c[] = argmax(i) x[i]
  baseline (x.sum(), x.argmax())
  tolerance f32(rtol=1e-5, atol=1e-5)
  test N in 1..10
  bench N=10
"""


def test_scalar_outputs_are_zero_dimensional():
    op = spec.parse_text(SCALARS).ops[0]
    out = reference(op, {"N": 4}, {"x": np.array([1.0, 5.0, 2.0, 5.0])})
    assert out["t"].shape == () and out["t"] == 13.0
    assert out["c"].shape == () and out["c"].dtype == np.int64 and out["c"] == 1


def test_zero_rows_keep_the_output_dtype():
    hb = OPS["hash_bucketize"]
    y = reference(hb, {"N": 0, "NB": 5}, {"ids": np.zeros(0, np.int64)})["y"]
    assert y.shape == (0,) and y.dtype == np.int64
    sort = OPS["sort_rows"]
    for dt, want in ((np.int64, np.int64), (np.float32, np.float64)):
        y = reference(sort, {"M": 0, "N": 3}, {"x": np.zeros((0, 3), dt)})["y"]
        assert y.shape == (0, 3) and y.dtype == want
        y = reference(sort, {"M": 2, "N": 0}, {"x": np.zeros((2, 0), dt)})["y"]
        assert y.shape == (2, 0) and y.dtype == want
    topk = reference(OPS["topk_rows"], {"M": 0, "N": 3, "K": 2}, {"x": np.zeros((0, 3))})
    assert topk["vals"].shape == topk["idx"].shape == (0, 2)
    assert topk["idx"].dtype == np.int64


AXIS0 = """\
op axis0
  dims M, N, K
  in  x: f32 | i64 [M, N]
  out s: like x [M, N]
  out v: like x [K, N]
  out ix: i64 [K, N]
  out c: like x [M, N]
  s[j, i] = sort(j) x[j, i]
  v[r, i] = topk(j, K) x[j, i]
  ix[r, i] = argtopk(j, K) x[j, i]
  c[j, i] = cumsum(j) x[j, i]
  baseline (torch.sort(x, dim=0, stable=True).values, *torch.topk(x, K, dim=0), torch.cumsum(x, dim=0))
  tolerance f32(rtol=1e-5, atol=1e-5)
  test M in 1..20, N in 1..10, K in 1..20 where K <= M
  bench M=64, N=64, K=4
"""


@PROPS
@given(st.integers(1, 8), st.integers(1, 4), st.data())
def test_collectives_along_the_first_axis(m, n, data):
    op = spec.parse_text(AXIS0).ops[0]
    k = data.draw(st.integers(1, m))
    x = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=m * n, max_size=m * n)),
                 dtype=np.int64).reshape(m, n)
    out = reference(op, {"M": m, "N": n, "K": k}, {"x": x})
    np.testing.assert_array_equal(out["s"], np.sort(x, axis=0))
    np.testing.assert_array_equal(out["c"], np.cumsum(x, axis=0))
    want = topk_rows({"M": n, "K": k}, x.T)
    np.testing.assert_array_equal(out["v"], want["vals"].T)
    np.testing.assert_array_equal(out["ix"], want["idx"].T)


# ---- judging against the reference (kdsl.compare) ------------------------------------

def test_compare_int64_keys_keep_full_precision():
    from kdsl.compare import compare
    op = OPS["topk_rows"]
    x = np.array([[2 ** 62, 2 ** 62 + 1, 0]], dtype=np.int64)
    ref = reference(op, {"M": 1, "N": 3, "K": 1}, {"x": x})
    right = {"vals": np.array([[2 ** 62 + 1]]), "idx": np.array([[1]])}
    wrong = {"vals": np.array([[2 ** 62 + 1]]), "idx": np.array([[0]])}
    assert compare(op, "i64", right, ref, {"x": x}) is None
    bad = compare(op, "i64", wrong, ref, {"x": x})
    assert bad is not None and bad.output == "idx"
    assert "points at 4611686018427387904" in bad.message


def test_compare_accepts_any_tied_index_but_not_repeats():
    from kdsl.compare import compare
    op = OPS["topk_rows"]
    x = np.array([[3.0, 1.0, 3.0, 3.0]])
    ref = reference(op, {"M": 1, "N": 4, "K": 2}, {"x": x})
    assert compare(op, "f32", {"vals": ref["vals"], "idx": np.array([[3, 0]])}, ref,
                   {"x": x}) is None
    bad = compare(op, "f32", {"vals": ref["vals"], "idx": np.array([[2, 2]])}, ref, {"x": x})
    assert bad is not None and "repeats an index" in bad.message


def test_compare_checks_distinct_indices_along_the_filled_axis():
    from kdsl.compare import compare
    op = spec.parse_text(AXIS0).ops[0]
    x = np.array([[5, 1], [4, 2], [3, 3]], dtype=np.int64)
    sizes = {"M": 3, "N": 2, "K": 2}
    ref = reference(op, sizes, {"x": x})
    assert compare(op, "i64", ref, ref, {"x": x}) is None
    for dt in ("f32", "i64"):  # an integer dtype variable with a table tolerance
        xs = x.astype(np.float32 if dt == "f32" else np.int64)
        assert compare(op, dt, reference(op, sizes, {"x": xs}), ref, {"x": xs}) is None
    repeated = dict(ref, ix=np.array([[0, 2], [0, 1]]))
    bad = compare(op, "i64", repeated, ref, {"x": x})
    assert bad is not None and bad.output == "ix"


def test_compare_floats():
    from kdsl.compare import compare
    op = OPS["softmax"]
    ref = {"y": np.array([[0.5, np.inf, np.nan]])}
    inputs = {"x": np.zeros((1, 3))}
    assert compare(op, "f32", {"y": np.array([[0.5000001, np.inf, np.nan]])}, ref, inputs) is None
    assert "NaN at [0, 0]" in compare(op, "f32", {"y": np.array([[np.nan, np.inf, np.nan]])},
                                      ref, inputs).message
    assert "where the reference is NaN" in compare(op, "f32", {"y": np.array([[0.5, np.inf, 1]])},
                                                   ref, inputs).message
    assert "outside rtol=1e-05 atol=1e-06" in compare(
        op, "f32", {"y": np.array([[0.6, np.inf, np.nan]])}, ref, inputs).message
    assert compare(op, "bf16", {"y": np.array([[0.504, np.inf, np.nan]])}, ref, inputs) is None
    assert compare(op, "f32", {"y": np.zeros((1, 2))}, ref, inputs).message.startswith("shape")
    assert compare(op, "f32", {}, ref, inputs).message == "missing"
