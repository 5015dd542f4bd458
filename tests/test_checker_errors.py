"""One test per diagnostic the assembler, checker and parser can give a well-formed file.

Each case edits a valid spec; the '@' in the edit marks where the caret must point
(the '@' itself is removed before parsing). Every case must give exactly one
diagnostic, at that line and column, containing the expected words.
"""
from __future__ import annotations

import re

import pytest

from kdsl import spec
from kdsl.errors import SpecError

SOFTMAX = """\
op softmax
  dims M, N
  in  x: f32 | bf16 | f16 [M, N]
  out y: like x [M, N]
  m[i]    = max(j) x[i, j]
  e[i, j] = exp(x[i, j] - m[i])
  y[i, j] = e[i, j] / sum(j) e[i, j]
  baseline torch.softmax(x, dim=-1)
  tolerance f32(rtol=1e-5, atol=1e-6) bf16(rtol=1.6e-2, atol=1e-2) f16(rtol=1e-3, atol=1e-3)
  test  M in 1..300, N in 1..5000
  bench M=32768, N=4096, dtype=bf16
"""

BAG = """\
op bag
  dims V, D, B, L
  in  table: f32 [V, D]
  in  idx: i64 [L] in 0..V
  in  offsets: i64 [B + 1] offsets(L)
  out y: like table [B, D]
  y[b, d] = sum(i in offsets[b] .. offsets[b + 1]) table[idx[i], d]
  baseline F.embedding_bag(idx, table, offsets, mode="sum", include_last_offset=True)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  V in 1..1000, D in 1..300, B in 1..200, L in 0..2000
  bench V=1000, D=128, B=64, L=1000
"""

TOPK = """\
op topk_rows
  dims M, N, K
  in  x: f32 | i64 [M, N]
  out vals: like x [M, K]
  out idx: i64 [M, K]
  vals[i, r] = topk(j, K) x[i, j]
  idx[i, r]  = argtopk(j, K) x[i, j]
  baseline torch.topk(x, K, dim=-1)
  tolerance exact
  test  M in 1..200, N in 1..2048, K in 1..64 where K <= N
  bench M=32768, N=1024, K=64, dtype=i64
"""

BASES = {"softmax": SOFTMAX, "bag": BAG, "topk": TOPK}


def edit(base: str, old: str, new: str) -> str:
    assert base.count(old) == 1, f"{old!r} must occur once in the base spec"
    return base.replace(old, new)


def at_op(text: str) -> str:
    """Mark the op's name: section-level errors point there."""
    return re.sub(r"^op ", "op @", text, count=1)


def located(marked: str) -> tuple[str, int, int]:
    assert marked.count("@") == 1, "one '@' marks the caret"
    before = marked[:marked.index("@")]
    line = before.count("\n") + 1
    col = len(before) - (before.rfind("\n") + 1) + 1
    return marked.replace("@", ""), line, col


def diagnostics(text: str):
    with pytest.raises(SpecError) as info:
        spec.parse_text(text, "t.kspec")
    return info.value.diagnostics


S, B, T = SOFTMAX, BAG, TOPK

# (id, marked text, expected words)
CASES = [
    # ---- declarations (assemble.py) ----
    ("duplicate dim", edit(S, "dims M, N", "dims M, N, @M"), "'M' is already declared (line 2)"),
    ("duplicate tensor", edit(S, "  out y", "  in  @x: f32 [M]\n  out y"),
     "'x' is already declared (line 3)"),
    ("tensor named like a dim", edit(S, "out y: like x [M, N]", "out @N: like x [M, N]"),
     "'N' is already declared"),
    ("unknown dtype", edit(S, "f32 | bf16 | f16 [M, N]", "f32 | @f8 [M, N]"), "unknown dtype 'f8'"),
    ("like an undeclared tensor", edit(S, "like x [M, N]", "like @q [M, N]"),
     "'like q': no tensor 'q' declared above"),
    ("second baseline", edit(S, "  tolerance", "  baseline @x\n  tolerance"), "a second baseline"),
    ("second tolerance", edit(S, "  test", "  @tolerance exact\n  test"),
     "a second tolerance line"),
    ("tolerance for an integer dtype",
     edit(S, "f16(rtol=1e-3, atol=1e-3)", "f16(rtol=1e-3, atol=1e-3) @i64(rtol=0, atol=0)"),
     "tolerances are per float dtype"),
    ("second test line", edit(S, "  bench", "  @test M in 1..2, N in 1..2\n  bench"),
     "a second test line"),
    ("missing baseline", at_op(edit(S, "  baseline torch.softmax(x, dim=-1)\n", "")),
     "op 'softmax' has no baseline"),
    ("missing tolerance", at_op(edit(S, "  tolerance f32(rtol=1e-5, atol=1e-6) bf16(rtol=1.6e-2, "
                                     "atol=1e-2) f16(rtol=1e-3, atol=1e-3)\n", "")),
     "op 'softmax' has no tolerance line"),
    ("missing test", at_op(edit(S, "  test  M in 1..300, N in 1..5000\n", "")),
     "op 'softmax' has no test line"),
    ("missing bench", at_op(edit(S, "  bench M=32768, N=4096, dtype=bf16\n", "")),
     "op 'softmax' has no bench line"),
    ("no output", at_op(edit(S, "  out y: like x [M, N]", "  in  y: like x [M, N]")),
     "op 'softmax' declares no output"),
    ("unknown bench device", edit(S, "  bench M", "  bench @tpu: M"), "unknown bench device 'tpu'"),
    ("unknown bench dtype", edit(S, "dtype=bf16", "@dtype=f8"), "bench dtype must be one of"),
    ("bench size not an integer", edit(S, "M=32768", "M=@1.5"), "bench size M: sizes are integers"),
    ("bench size not a number", edit(S, "M=32768", "M=@N"), "bench size M: 'N' is not a dim"),
    ("duplicate op", S + at_op(S),
     "op 'softmax' is already declared on line 1"),
    ("no op at all", "@# only a comment\n", "no op declared"),
    # ---- syntax-level meaning (parser.py) ----
    ("range in a plain call", edit(S, "exp(x[i, j] - m[i])", "exp(@j in 0..N)"),
     "'j in ..' ranges belong to a reduction"),
    ("reduction without a body", edit(S, "e[i, j] / sum(j) e[i, j]", "e[i, j] / @sum(j)"),
     "'sum(...)' needs a body after it"),
    ("reduction over an expression", edit(S, "sum(j) e[i, j]", "sum(@1) e[i, j]"),
     "'sum(...)' takes index names here"),
    ("reduction over nothing", edit(S, "sum(j) e[i, j]", "@sum() e[i, j]"),
     "'sum()' needs the indices to reduce over"),
    ("scan over two indices", edit(S, "sum(j) e[i, j]", "@cumsum(i, j) e[i, j]"),
     "'cumsum' scans one output index"),
    ("topk without k", edit(T, "= topk(j, K)", "= @topk(j)"), "'topk' is written topk(j, K)"),
    ("sort with k", edit(T, "= topk(j, K)", "= @sort(j, K)"), "'sort' is written sort(j)"),
    ("elementwise function with a body", edit(S, "sum(j) e[i, j]", "@exp(j) e[i, j]"),
     "'exp' is not a reduction, scan or collective"),
    ("offsets without a total", edit(B, "offsets(L)", "@offsets"),
     "offsets need their total length"),
    ("positive with an argument", edit(S, "[M, N]\n  out", "[M, N] @positive(1)\n  out"),
     "'positive' takes no argument"),
    ("unknown domain", edit(S, "[M, N]\n  out", "[M, N] @finite\n  out"),
     "unknown input domain 'finite'"),
    ("expression on the left side", edit(S, "e[i, j] = exp", "e[i @+ 1, j] = exp"),
     "the left side is indexed by plain index names"),
    ("index twice on the left side", edit(S, "e[i, j] = exp", "e[i, @i] = exp"),
     "index 'i' appears twice on the left side"),
    ("unknown tolerance key", edit(S, "f32(rtol=1e-5, atol=1e-6)", "f32(rtol=1e-5, @eps=1e-6)"),
     "unknown tolerance 'eps'"),
    ("tolerance not a number", edit(S, "f32(rtol=1e-5, atol=1e-6)", "f32(@rtol=N, atol=1e-6)"),
     "'rtol' must be a number"),
    # ---- dims, sizes, domains (checker.py, domains.py) ----
    ("unknown dim in a shape", edit(S, "out y: like x [M, N]", "out y: like x [M, @Q]"),
     "unknown dim 'Q' in the shape of 'y'"),
    ("float in a shape", edit(S, "out y: like x [M, N]", "out y: like x [M, @1.5]"),
     "sizes are integers"),
    ("call in a shape", edit(S, "out y: like x [M, N]", "out y: like x [M, @exp(N)]"),
     "only dims, integers and + - * // % ** belong in a size"),
    ("test range for an unknown dim", edit(S, "N in 1..5000", "N in 1..5000, @Q in 1..3"),
     "test range for unknown dim 'Q'"),
    ("empty test range", edit(S, "N in 1..5000", "@N in 5..1"), "test range N in 5..1 is empty"),
    ("negative test range", edit(S, "N in 1..5000", "@N in -1..5"), "is empty or negative"),
    ("test range not a size", edit(S, "N in 1..5000", "N in 1..@M"),
     "test range of N: 'M' is not a dim"),
    ("test range given twice", edit(S, "N in 1..5000", "N in 1..5000, @M in 1..4"),
     "a second test range for dim 'M'"),
    ("bench size given twice", edit(S, "  bench M=32768, N=4096", "  @bench M=32768, N=4096, M=2"),
     "bench gives dim 'M' twice"),
    ("dim without a test range", edit(S, "test  M in 1..300, N in 1..5000", "test  @M in 1..300"),
     "dim 'N' has no test range"),
    ("bench names an unknown dim", edit(S, "  bench M", "  @bench Q=3, M"),
     "bench names unknown dim 'Q'"),
    ("missing bench size", edit(S, "  bench M=32768, ", "  @bench "),
     "bench size missing for dim M"),
    ("bench dtype not the op's", edit(S, "  bench M=32768, N=4096, dtype=bf16",
                                      "  @bench M=32768, N=4096, dtype=i64"),
     "bench dtype i64 is not one of this op's dtypes"),
    ("test condition not a size", edit(S, "N in 1..5000", "N in 1..5000 where N <= @Q"),
     "test condition: 'Q' is not a dim"),
    ("bench breaks a test condition", edit(S, "  bench M", "  @bench M").replace(
        "N in 1..5000", "N in 1..5000 where N > M"),
     "bench sizes break a test condition"),
    ("no test sizes satisfy the conditions",
     edit(S, "M in 1..300, N in 1..5000", "@M in 1..300, N in 1..3000 where N > 4000"),
     "no sizes in the test ranges satisfy the conditions"),
    ("test sizes too large", edit(S, "test  M in 1..300", "test  @M in 1..300000"),
     "test sizes too large: M=300000, N=5000 gives 3,000,000,000 elements"),
    ("domain names a non-dim", edit(B, "in 0..V", "in 0..@Q"),
     "domain of 'idx' uses 'Q', which is not a dim"),
    ("domain bound not a size", edit(B, "in 0..V", "in 0..@exp(V)"),
     "domain of 'idx': only dims, integers"),
    ("offsets on a 2-D tensor", edit(B, "in  table: f32 [V, D]",
                                     "in  table: f32 [V, D]\n  in  @o2: i64 [V, D] offsets(L)"),
     "offsets(...) describe a 1-D integer tensor"),
    ("domain on a bool tensor", edit(S, "out y", "in  @z: bool [M] positive\n  out y"),
     "'z' holds bools; a domain needs numbers"),
    ("empty domain", edit(B, "in  idx: i64 [L] in 0..V", "in  @idx: i64 [L] in 5..2"),
     "domain of 'idx' is empty"),
    # ---- dtypes ----
    ("two dtype variables", edit(S, "out y", "in  @z: f32 | f16 [M]\n  out y"),
     "dtype conflict: 'z' is f32 | f16 but 'x' is f32 | bf16 | f16"),
    ("tolerance misses a dtype", at_op(edit(S, " f16(rtol=1e-3, atol=1e-3)", "")),
     "no tolerance for dtype f16"),
    ("float into an integer output", edit(T, "  idx[i, r]  = argtopk(j, K) x[i, j]",
                                          "  @idx[i, r]  = r * 0.5"),
     "dtype conflict: the right side is a float but 'idx' is an integer tensor"),
    ("bool into a float output", edit(S, "  y[i, j] = e[i, j] / sum(j) e[i, j]",
                                      "  @y[i, j] = e[i, j] > 0"),
     "dtype conflict: the right side is a bool but 'y' is not"),
    ("argmax over two indices", edit(S, "  m[i]    = max(j) x[i, j]",
                                     "  q[a in 0 .. 1] = @argmax(i, j) x[i, j]\n  m[i]    = max(j) x[i, j]"),
     "'argmax' over 2 indices: it takes one index"),
    # ---- statements ----
    ("assigning an input", edit(S, "  m[i]    = max(j) x[i, j]", "  @x[i, j] = 1.0"),
     "'x' is an input and cannot be assigned"),
    ("assigning twice", edit(S, "  y[i, j] = e", "  @e[i, j] = 1.0\n  y[i, j] = e"),
     "'e' is assigned twice"),
    ("assigning with the wrong rank", edit(S, "  y[i, j] = e[i, j] /", "  @y[i] = e[i, 0] /"),
     "'y' has rank 2 but is assigned with 1 indices"),
    ("intermediate index with no extent", edit(S, "  m[i]    = max(j) x[i, j]",
                                               "  @q[i] = 1.0\n  m[i]    = max(j) x[i, j]"),
     "cannot infer the range of index 'i': it never indexes a tensor directly"),
    ("output never assigned", edit(S, "  y[i, j] = e[i, j] / sum(j) e[i, j]\n", "").replace(
        "out y", "out @y"), "output 'y' is never assigned"),
    ("affine index whose step does not divide the dim",
     edit(S, "  m[i]    = max(j) x[i, j]",
          "  q[g] = sum(k in 0 .. 2) x[0, @g * 2 + k]\n  m[i]    = max(j) x[i, j]"),
     "cannot infer the range of index 'g' from subscript 1 of 'x' (g * 2 + k): the dim's "
     "size N = 1 is not a multiple of the step 2 of 'g'"),
    ("affine reduction index whose step does not divide the dim",
     edit(S, "sum(j) e[i, j]", "sum(g, k in 0 .. 2) e[i, @g * 2 + k]"),
     "cannot infer the range of index 'g' from subscript 1 of 'e' (g * 2 + k): the dim's "
     "size N = 1 is not a multiple of the step 2 of 'g'"),
    ("declared range against an output's dim", edit(S, "  y[i, j] = e", "  y[i, j in 0 .. @M] = e"),
     "'j' is declared in 0 .. M but dim 1 of 'y' has size N"),
    ("declared range not a size", edit(S, "  m[i]    = max(j) x[i, j]",
                                       "  q[j in 0 .. @1.5] = 1.0\n  m[i]    = max(j) x[i, j]"),
     "the end of 'j' on the left side: sizes are integers"),
    ("declared range not from 0", edit(S, "  m[i]    = max(j) x[i, j]",
                                       "  q[j in @1 .. N] = 1.0\n  m[i]    = max(j) x[i, j]"),
     "a left-side range starts at 0 ('j' runs over a dim of 'q'), but this one starts at 1"),
    ("declared range below 0", edit(S, "  m[i]    = max(j) x[i, j]",
                                    "  q[j in 0 .. @N - 6000] = 1.0\n  m[i]    = max(j) x[i, j]"),
     "the range of 'j' ends at"),
    ("unknown name", edit(S, "exp(x[i, j] - m[i])", "exp(x[i, j] - @q)"), "unknown name 'q'"),
    ("constant on the left of a wide axis", edit(S, "  y[i, j] = e[i, j]", "  y[i, @0] = e[i, 0]"),
     "the left side writes dim 1 of 'y' at 0 alone, but it has size N"),
    ("tensor read bare", edit(S, "exp(x[i, j] - m[i])", "exp(x[i, j] - @m)"),
     "'m' is a tensor of 1 dim: read it with subscripts, m[...]"),
    ("unknown tensor", edit(S, "exp(x[i, j] - m[i])", "exp(@q[i, j] - m[i])"),
     "unknown tensor 'q'"),
    ("unknown function", edit(S, "exp(x[i, j] - m[i])", "@expo(x[i, j] - m[i])"),
     "unknown function 'expo'"),
    ("wrong arity", edit(S, "exp(x[i, j] - m[i])", "@exp(x[i, j], m[i])"),
     "'exp' takes 1 argument, got 2"),
    ("elementwise max with one argument", edit(S, "exp(x[i, j] - m[i])", "exp(@max(x[i, j]))"),
     "'max' takes 2 arguments, got 1"),
    ("read before assigned", edit(S, "  m[i]    = max(j) x[i, j]", "  m[i]    = max(j) @e[i, j]"),
     "'e' is read before it is assigned"),
    ("own right side", edit(S, "  y[i, j] = e[i, j] / sum(j) e[i, j]",
                            "  y[i, j] = e[i, j] / @y[i, j]"), "'y' is used on its own right side"),
    ("intermediate on its own right side", edit(S, "  m[i]    = max(j) x[i, j]",
                                                "  m[i]    = max(j) x[i, j] + @m[i]"),
     "'m' is used on its own right side"),
    ("rank mismatch", edit(S, "exp(x[i, j] - m[i])", "exp(x[i, j] - @m[i, j])"),
     "rank mismatch: 'm' has rank 1 but is indexed with 2 subscripts"),
    ("shape mismatch", edit(S, "exp(x[i, j] - m[i])", "exp(x[i, j] - m[@j])"),
     "shape mismatch: index 'j' ranges over N (dim 1 of x) but indexes dim 0 of 'm', of size M"),
    ("free reduction index", edit(S, "  m[i]    = max(j) x[i, j]", "  m[i]    = x[i, @j]"),
     "index 'j' is free: reduce over it"),
    ("float subscript", edit(S, "exp(x[i, j] - m[i])", "exp(x[i, j] - m[@1.0])"),
     "subscript 0 of 'm' is not an integer"),
    ("float pad of an integer tensor", edit(B, "table[idx[i], d]", "table[idx[i] pad(@0.5), d]"),
     "pad value is a float but 'idx' holds integers"),
    ("non-integer reduction range", edit(S, "sum(j) e[i, j]", "sum(j in 0 .. @1.5) e[i, j]"),
     "the range of 'j' must be integer"),
    ("reduction index with no extent", edit(S, "sum(j) e[i, j]", "sum(@k) 1.0"),
     "cannot infer the range of index 'k'; write sum(k in 0..N)"),
    ("scan over a reduced index", edit(S, "  m[i]    = max(j) x[i, j]",
                                       "  m[i]    = @cumsum(j) x[i, j]"),
     "'cumsum(j)' scans an output index, but 'j' is not on the left side"),
    ("segment_of misused", edit(B, "table[idx[i], d]", "table[idx[@segment_of(i)], d]"),
     "segment_of takes an offsets tensor and an index"),
    ("segment_of of a non-offsets tensor", edit(B, "table[idx[i], d]",
                                                "table[idx[segment_of(@idx, i)], d]"),
     "'idx' must be a 1-D input declared with an offsets(N) domain"),
    # ---- collectives ----
    ("collective inside an expression",
     edit(T, "= topk(j, K) x[i, j]", "= 1 + @topk(j, K) x[i, j]"),
     "'topk' must be the whole right side of a statement"),
    ("sort along a reduced index", edit(T, "vals[i, r] = topk(j, K) x[i, j]",
                                        "vals[i, r] = @sort(j) x[i, j]"),
     "'sort(j)' sorts along an output index"),
    ("topk with no output index", edit(T, "vals[i, r] = topk(j, K) x[i, j]",
                                       "vals[i, r] = @topk(j, K) x[i, j] * r"),
     "'topk' fills one output index that its body does not use; found none"),
    ("topk k not a size", edit(T, "vals[i, r] = topk(j, K) x[i, j]",
                               "vals[i, r] = topk(j, @1.5) x[i, j]"),
     "k of topk: sizes are integers"),
    ("topk k against the output extent", edit(T, "vals[i, r] = topk(j, K) x[i, j]",
                                              "vals[i, r] = @topk(j, N) x[i, j]"),
     "'topk' keeps N values but index 'r' ranges over K"),
    # ---- bounds ----
    ("gather through an input without a domain", edit(B, "in  idx: i64 [L] in 0..V",
                                                      "in  idx: i64 [L]").replace(
        "table[idx[i], d]", "table[@idx[i], d]"), "subscript 0 of 'table' may take any value"),
    ("shifted read without pad", edit(S, "  y[i, j] = e[i, j] /", "  y[i, j] = e[i, j @+ 1] /"),
     "index out of range: subscript 1 of 'e' reaches 1.."),
    # ---- baseline ----
    ("baseline syntax error", edit(S, "torch.softmax(x, dim=-1)", "torch.softmax@(x, dim=-1"),
     "baseline does not parse: '(' was never closed"),
    ("baseline invalid syntax", edit(S, "torch.softmax(x, dim=-1)", "torch.softmax(x,@, dim=-1)"),
     "baseline does not parse: invalid syntax"),
    ("baseline unknown name", edit(S, "torch.softmax(x, dim=-1)", "torch.softmax(@z, dim=-1)"),
     "baseline uses unknown name 'z'"),
    ("baseline binds an input", edit(S, "torch.softmax(x, dim=-1)",
                                     "torch.softmax((@x := x * 2), dim=-1)"),
     "baseline binds 'x', a name it is given"),
]


# ---- limits: numbers, arithmetic and counts that would make checking slow or crash ----
_SUM40 = " + ".join(["M"] * 40)
LIMIT_CASES = [
    ("integer literal past 64 bits", edit(S, "1..300", "1..@" + "9" * 400),
     "integer 9999999999...9999 (400 digits) is too large"),
    ("integer literal of 2**63", edit(S, "1e-5", "@9223372036854775808"),
     "integer 9223372036854775808 is too large"),
    ("float literal past the float range", edit(S, "1e-5", "@1e400"),
     "number 1e400 is too large for a float"),
    ("negative tolerance", edit(S, "atol=1e-6", "@atol=-1"), "'atol' must not be negative"),
    ("power tower in a bench size", edit(S, "M=32768", "M=((@2 ** 64) ** 64) ** 64"),
     "integer arithmetic too large: (2 ** 64) ** 64 can pass 4096 bits"),
    ("power tower in a shape", edit(S, "out y: like x [M, N]", "out y: like x [(@M ** 64) ** 64, N]"),
     "integer arithmetic too large"),
    ("power tower in a subscript", edit(S, "exp(x[i, j] - m[i])", "exp(x[i, j] - m[(@i ** 64) ** 64])"),
     "integer arithmetic too large"),
    ("bench size past 64 bits", edit(S, "M=32768", "@M=9223372036854775807 * 2"),
     "bench size M takes 64 bits; a size fits 64 bits"),
    ("test range too large", edit(S, "N in 1..5000", "N in 1..@5000 * 5000"),
     "test range of N ends at 25,000,000; test sizes are at most 4,194,304"),
    ("domain past 64 bits", edit(B, "in 0..V", "in 0..@V * 9223372036854775807"),
     "domain of 'idx' reaches"),
    ("baseline too deep for Python", edit(S, "torch.softmax(x, dim=-1)", "@" + "+".join(["x"] * 15_000)),
     "baseline nested too deeply for Python to parse"),
    ("baseline power tower", edit(S, "torch.softmax(x, dim=-1)", "torch.softmax(x, dim=@2 ** 64 ** 64)"),
     "baseline arithmetic too large: 2 ** 64 ** 64"),
    ("too many ops", "".join(S.replace("op softmax", f"op s{k}") for k in range(64))
     + S.replace("op softmax", "op @s64"), "more than 64 ops in one spec"),
    ("too many dims", edit(S, "dims M, N", "dims M, N, " + ", ".join(f"D{k}" for k in range(30))
                           + ", @D30"), "op 'softmax' declares more than 32 dims"),
    ("too many tensors", edit(S, "  out y", "".join(f"  in  z{k}: f32 [M]\n" for k in range(31))
                              + "  out @y"), "op 'softmax' declares more than 32 tensors"),
    ("too many statements", edit(S, "  baseline", "".join(f"  t{k}[i] = x[i, 0]\n" for k in range(61))
                                 + "  @t61[i] = x[i, 0]\n  baseline"),
     "op 'softmax' declares more than 64 statements"),
    ("too many bench lines", S + "  bench M=1, N=1\n" * 15 + "  @bench M=1, N=1\n",
     "op 'softmax' declares more than 16 bench lines"),
    ("rank too high", edit(S, "  out y", "  in  @z: f32 [M, M, M, M, M, M, M, M, M]\n  out y"),
     "'z' has rank 9; at most 8"),
    ("too many test conditions", edit(S, "N in 1..5000", "N in 1..5000 where "
                                      + "M >= 1, " * 16 + "@M <= N"),
     "more than 16 test conditions"),
    ("too many size terms in a spec", "".join(
        S.replace("op softmax", f"op s{k}").replace("N in 1..5000", "N in 1..5000 where " + ", ".join([f"{_SUM40} >= 0"] * 6))
        for k in range(4)) + S.replace("op softmax", "op @s4").replace(
        "N in 1..5000", "N in 1..5000 where " + ", ".join([f"{_SUM40} >= 0"] * 6)),
     "the shapes and test conditions of the ops up to 's4' hold 2450 terms; a spec holds at most 2000"),
    ("too many size terms", at_op(edit(S, "N in 1..5000", "N in 1..5000 where "
                                       + ", ".join([f"{_SUM40} >= 0"] * 14))),
     "the shapes and test conditions of 'softmax' hold 1138 terms; at most 1000"),
]
CASES += LIMIT_CASES

MESSAGES: dict[str, str] = {}  # case id -> the message it gave, for the coverage test


@pytest.mark.parametrize("marked,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_located_diagnostic(marked, words, request):
    text, line, col = located(marked)
    diags = diagnostics(text)
    shown = "\n".join(f"{d.line}:{d.column}: {d.message}" for d in diags)
    assert len(diags) == 1, shown
    d = diags[0]
    assert words in d.message, shown
    assert (d.line, d.column) == (line, col), shown
    assert d.file == "t.kspec"
    MESSAGES[request.node.callspec.id] = d.message


@pytest.mark.parametrize("name", sorted(BASES))
def test_bases_are_valid(name):
    assert spec.parse_text(BASES[name], "t.kspec").ops[0].name


def _templates() -> list[str]:
    """Every message the declaration and semantic checks can give, as a regex."""
    import ast
    import inspect

    from kdsl import assemble, checker, domains, parser

    def pattern(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return re.escape(node.value)
        if isinstance(node, ast.JoinedStr):
            return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".*?"
                           for v in node.values)
        return None  # a message computed elsewhere (err.why): covered through its caller

    out = []
    for module in (assemble, checker, domains, parser):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            msg = None
            if name in ("error", "fatal", "_Invalid") and len(node.args) == 2:
                msg = node.args[1]
            elif name == "append" and module is domains and isinstance(node.args[0], ast.Tuple):
                msg = node.args[0].elts[1]
            p = pattern(msg) if msg is not None else None
            if p is not None:
                out.append(p)
    return out


def test_every_diagnostic_kind_is_covered():
    """Each message template in assemble/checker/domains/parser is given by some case above."""
    for case_id, marked, _ in CASES:
        if case_id not in MESSAGES:  # run on its own: compute what the cases give
            MESSAGES[case_id] = diagnostics(located(marked)[0])[0].message
    templates = _templates()
    assert len(templates) > 60
    missing = [t for t in templates
               if not any(re.fullmatch(t, m, re.S) for m in MESSAGES.values())]
    assert not missing, missing


def test_several_errors_are_all_reported():
    text = edit(SOFTMAX, "  baseline torch.softmax(x, dim=-1)\n", "").replace(
        "  bench M=32768, N=4096, dtype=bf16\n", "")
    msgs = [d.message for d in diagnostics(text)]
    assert any("no baseline" in m for m in msgs) and any("no bench line" in m for m in msgs)


def test_render_has_caret_under_the_column():
    text, line, col = located(edit(S, "exp(x[i, j] - m[i])", "exp(@q[i, j] - m[i])"))
    with pytest.raises(SpecError) as info:
        spec.parse_text(text, "t.kspec")
    head, src, caret = info.value.render().splitlines()
    assert head == f"t.kspec:{line}:{col}: error: unknown tensor 'q'"
    assert src == "  " + text.splitlines()[line - 1]
    assert caret == "  " + " " * (col - 1) + "^"


def test_an_output_of_another_float_dtype_takes_the_op_dtypes_tolerance():
    """A bf16 op with an f32 output is judged by bf16's tolerance (compare.tolerance), so it
    needs no f32 entry; where the op's dtype is not a float, the output's own dtype does,
    and the error names the output."""
    from kdsl import spec
    text = """
op rowsum_mixed
  dims M, N
  in  x: bf16 [M, N]
  out y: f32 [M]
  y[i] = sum(j) x[i, j]
  baseline x.float().sum(1)
  tolerance bf16(rtol=1e-3, atol=1e-3)
  test M in 1..8, N in 1..64
  bench M=64, N=64
"""
    spec.parse_text(text, "t.kspec")
    with pytest.raises(SpecError, match=r"no tolerance for dtype f32 \(the dtype of output 'y'\)"):
        spec.parse_text(text.replace("  in  x: bf16", "  in  k: i64 [M] in 0..5\n  in  x: bf16"),
                        "t.kspec")
