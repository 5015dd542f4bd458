"""lower.stages: ops split into stages joined by scratch tensors, and Triton's choice of
when to split. The staged kernels themselves run in the interpreter against the reference
in test_backend_triton.py (the NOVEL specs channel_norm, batch_nll, mean_sq)."""
from __future__ import annotations

import textwrap

import pytest

from kdsl import ir
from kdsl import spec as kspec
from kdsl.backends import Unsupported, get
from kdsl.backends.lower.stages import Staged, hoist_reductions, split
from kdsl.backends.triton import backend as tb


def _op(text: str) -> ir.Op:
    return kspec.parse_text(textwrap.dedent(text).strip() + "\n", "<test>").ops[0]


CHANNEL_NORM = """
    op cn
      dims N, C, H, W
      in  x: f32 | f16 [N, C, H, W]
      out y: like x [N, C, H, W]
      mu[c] = mean(n, h, w) x[n, c, h, w]
      y[n, c, h, w] = x[n, c, h, w] - mu[c]
      baseline x - x.mean(dim=(0, 2, 3), keepdim=True)
      tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=2e-3, atol=4e-3)
      test  N in 1..3, C in 1..3, H in 1..6, W in 1..9
      bench N=64, C=64, H=512, W=512, dtype=f32
"""

NESTED = """
    op nested
      dims M, C
      in  z: f32 [M, C]
      out loss: f32 []
      loss[] = sum(i) log(sum(j) exp(z[i, j]))
      baseline torch.logsumexp(z, dim=1).sum()
      tolerance f32(rtol=1e-5, atol=1e-5)
      test  M in 1..12, C in 1..40
      bench M=64, C=4096, dtype=f32
"""

ROWWISE = """
    op rowwise
      dims M, N
      in  x: f32 [M, N]
      out y: like x [M, N]
      m[i] = max(j) x[i, j]
      y[i, j] = x[i, j] - m[i]
      baseline x - x.amax(dim=1, keepdim=True)
      tolerance f32(rtol=1e-5, atol=1e-5)
      test  M in 1..12, N in 1..40
      bench M=32768, N=4096, dtype=f32
"""


def test_a_statistic_read_across_program_axes_is_staged_and_peeled():
    op = _op(CHANNEL_NORM)
    lowered = tb._lowered(op)
    assert isinstance(lowered, Staged) and lowered.peeled
    # partials over (c, n), their mean over n, then the pointwise output
    assert [tb._plan(s).kind for s in lowered.stages] == ["rows", "rows", "pointwise"]
    part = next(t for t in lowered.scratch if t.name.endswith("_part"))
    assert [e.name for e in part.shape] == ["C", "N"]  # the outer reduced index peeled
    last = lowered.stages[-1]
    assert {t.name for t in last.tensors if t.role == "in"} == {"x", "mu"}


def test_a_few_programs_are_not_peeled_when_the_bench_has_enough():
    op = _op(CHANNEL_NORM)
    staged = split(op, {"N": 64, "C": 4096, "H": 8, "W": 8}, min_programs=1024)
    assert not staged.peeled and len(staged.stages) == 2


def test_a_nested_reduction_is_hoisted_into_an_intermediate_of_its_context():
    op = _op(NESTED)
    statements, tensors = hoist_reductions(op)
    inner = statements[0]
    assert isinstance(inner.value, ir.Reduce) and inner.value.op == "sum"
    assert inner.indices == ("i",)  # what it reads of the enclosing sum
    assert [e.name for e in tensors[inner.target].shape] == ["M"]
    outer = statements[-1].value
    assert isinstance(outer, ir.Reduce)
    assert any(isinstance(n, ir.Access) and n.tensor == inner.target for n in ir.walk(outer))
    assert get("triton").supports(op, "cuda") is None  # was: a reduction depends on ['i']


def test_row_statistics_stay_fused():
    op = _op(ROWWISE)
    assert not isinstance(tb._lowered(op), Staged)


def test_no_reduction_is_nothing_to_stage():
    op = _op("""
        op plain
          dims N
          in  x: f32 [N]
          out y: like x [N]
          y[i] = x[i] * 2
          baseline x * 2
          tolerance f32(rtol=1e-6, atol=1e-6)
          test  N in 1..10
          bench N=1024, dtype=f32
    """)
    with pytest.raises(Unsupported):
        split(op, {"N": 1024})


def test_staged_genes_are_each_stages_genes_under_a_prefix():
    op = _op(CHANNEL_NORM)
    space = get("triton").space(op, "cuda")
    names = {g.name for g in space.genes}
    assert {"s0.BLOCK_C", "s1.BLOCK_R", "s2.BLOCK_C"} <= names
    src = get("triton").render(op, space.default(), "cuda")
    assert "import torch" in src and "torch.empty(" in src
    assert src.count("def _stage") == 3


def test_library_row_ops_are_not_staged():
    """The library's fused kernels keep their measured form."""
    for path, op in kspec.library_ops():
        if tb._dot().matches(op):
            continue
        try:
            lowered = tb._lowered(op)
        except Unsupported:
            continue
        assert not isinstance(lowered, Staged), op.name


SCANS = """
    op scans
      dims M, N
      in  x: f32 [M, N]
      out y: like x [M, N]
      out z: like x [M, N]
      y[i, j] = sum(k in j .. N) x[i, k]
      z[i, j] = sum(k in 0 .. j + 1) x[i, k] * 2
      baseline (torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1]), torch.cumsum(x, 1) * 2)
      tolerance f32(rtol=1e-4, atol=1e-4)
      test  M in 1..8, N in 1..100
      bench M=4096, N=4096, dtype=f32
"""


def test_prefix_and_suffix_ranged_sums_become_scans():
    from kdsl.backends.lower.scans import ranges_as_scans
    op = ranges_as_scans(_op(SCANS))
    z = next(st for st in op.statements if st.target == "z")
    assert isinstance(z.value, ir.Scan) and z.value.op == "cumsum" and z.value.index == "j"
    rev = next(st for st in op.statements if st.target.startswith("kd_rev"))
    assert isinstance(rev.value, ir.Scan)  # a prefix scan of the reversed row ...
    y = next(st for st in op.statements if st.target == "y")
    assert isinstance(y.value, ir.Access) and y.value.tensor == rev.target  # ... read reversed
    lowered = tb._lowered(_op(SCANS))  # the reversed scan is a stage of its own
    assert isinstance(lowered, Staged)
    assert [tb._stage_kind(s) for s in lowered.stages] == ["rows", "rows"]


def test_attention_in_index_notation_is_two_gemms_and_a_softmax():
    op = _op("""
        op attn
          dims B, S, D
          in  q: f32 [B, S, D]
          in  k: like q [B, S, D]
          in  v: like q [B, S, D]
          out y: like q [B, S, D]
          s[b, i, j] = (sum(d) q[b, i, d] * k[b, j, d]) / sqrt(D)
          m[b, i]    = max(j) s[b, i, j]
          e[b, i, j] = exp(s[b, i, j] - m[b, i])
          p[b, i, j] = e[b, i, j] / sum(j) e[b, i, j]
          y[b, i, d] = sum(j) p[b, i, j] * v[b, j, d]
          baseline F.scaled_dot_product_attention(q, k, v)
          tolerance f32(rtol=2e-3, atol=2e-3)
          test  B in 1..2, S in 1..40, D in 1..24
          bench B=32, S=512, D=1024, dtype=f32
    """)
    lowered = tb._lowered(op)
    kinds = [tb._stage_kind(s) for s in lowered.stages]
    assert kinds[0] == "contraction" and kinds[-1] == "contraction"
    src = get("triton").render(op, get("triton").space(op, "cuda").default(), "cuda")
    assert "GENOME_s0" in src and f"GENOME_s{len(kinds) - 1}" in src


def test_a_long_sum_against_few_outputs_is_split_into_chunks():
    op = _op("""
        op matvec
          dims M, K
          in  a: f32 [M, K]
          in  x: f32 [K]
          out y: f32 [M]
          y[i] = sum(k) a[i, k] * x[k]
          baseline a @ x
          tolerance f32(rtol=2e-3, atol=1e-2)
          test  M in 1..30, K in 1..20000
          bench M=2048, K=1048576, dtype=f32
    """)
    lowered = tb._lowered(op)
    assert isinstance(lowered, Staged) and lowered.peeled
    # a vector has no column side: the partials are row reductions, not GEMM tiles
    assert [tb._stage_kind(s) for s in lowered.stages] == ["rows", "rows"]
    part = lowered.stages[0].statements[0]
    reads = [n for n in ir.walk(part.value) if isinstance(n, ir.Access)]
    assert all(r.pad == ir.Num(0) for r in reads)  # the last chunk reads zeros past K
    # a square GEMM stays one kernel
    square = _op("""
        op mm
          dims N
          in  a: f32 [N, N]
          in  b: f32 [N, N]
          out c: f32 [N, N]
          c[i, j] = sum(k) a[i, k] * b[k, j]
          baseline a @ b
          tolerance f32(rtol=2e-3, atol=2e-3)
          test  N in 1..30
          bench N=4096, dtype=f32
    """)
    assert tb._lowered(square) == tb.CONTRACTION


def test_a_mean_and_its_variance_are_one_stage_and_combine_by_total_variance():
    op = _op("""
        op bn
          dims N, C, H, W
          in  x: f32 [N, C, H, W]
          out y: f32 [N, C, H, W]
          mu[c]  = mean(n, h, w) x[n, c, h, w]
          var[c] = mean(n, h, w) (x[n, c, h, w] - mu[c]) ** 2
          y[n, c, h, w] = (x[n, c, h, w] - mu[c]) * rsqrt(var[c] + 1e-5)
          baseline F.batch_norm(x, None, None, training=True, eps=1e-5)
          tolerance f32(rtol=1e-4, atol=1e-4)
          test  N in 2..3, C in 1..3, H in 1..6, W in 1..9
          bench N=64, C=64, H=512, W=512, dtype=f32
    """)
    lowered = tb._lowered(op)
    outs = [sorted(t.name for t in s.tensors if t.role == "out") for s in lowered.stages]
    assert outs == [["mu_part", "var_part"], ["mu", "var"], ["y"]]  # x is read twice, not 3x
    assert tb._plan(lowered.stages[0]).fused  # the partials: one Welford pass
    var = next(st for st in lowered.stages[1].statements if st.target == "var")
    reads = {n.tensor for n in ir.walk(var.value) if isinstance(n, ir.Access)}
    assert reads == {"var_part", "mu_part"}  # partial variances + spread of partial means


def test_exclusive_ranged_sums_are_inclusive_scans_less_the_point():
    from kdsl.backends.lower.scans import ranges_as_scans
    op = ranges_as_scans(_op("""
        op excl
          dims M, N
          in  x: f32 [M, N]
          out y: f32 [M, N]
          out z: f32 [M, N]
          y[i, j] = sum(k in 0 .. j) x[i, k]
          z[i, j] = sum(k in j + 1 .. N) x[i, k]
          baseline (torch.cumsum(x, 1) - x, torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1]) - x)
          tolerance f32(rtol=1e-4, atol=1e-4)
          test  M in 1..8, N in 1..100
          bench M=4096, N=4096, dtype=f32
    """))
    y = next(st for st in op.statements if st.target == "y").value
    assert isinstance(y, ir.Binary) and y.op == "-" and isinstance(y.left, ir.Scan)
    assert not any(isinstance(n, ir.Reduce) for st in op.statements for n in ir.walk(st.value))


def test_a_long_single_index_reduction_to_few_outputs_is_cut_in_chunks():
    op = _op("""
        op vec_mean
          dims N
          in  x: f32 [N]
          out y: f32 []
          y[] = mean(i) exp(x[i] * 0.1)
          baseline torch.exp(x * 0.1).mean()
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  N in 1..100000
          bench N=16777216, dtype=f32
    """)
    lowered = tb._lowered(op)
    assert isinstance(lowered, Staged) and lowered.peeled
    part = lowered.stages[0].statements[0].value
    (r,) = part.indices  # i over one chunk: s * CHUNK .. min(s * CHUNK + CHUNK, N)
    assert isinstance(r.hi, ir.Call) and r.hi.fn == "min"
    last = lowered.stages[-1].statements[0].value
    assert isinstance(last, ir.Binary) and last.op == "/"  # a mean: partial sums over N
    defaults = get("triton").space(op, "cuda").default()
    assert defaults["s0.BLOCK_R"] == 1 and defaults["s0.BLOCK_C"] == 1024  # along the chunk


def test_chunks_are_sized_for_the_device_and_each_gets_a_program():
    """A mean over 32768 per-row losses: chunks of 32768 / 1024 rows, at least 256, so
    128 of them (not 4 of 8192), and the stage that sums them gives each row of chunks a
    program of its own rather than one program walking all of them."""
    from kdsl.backends.lower.partials import CHUNK, SHORTEST_CHUNK, chunk_length
    from kdsl.backends.triton.dot import SMS
    assert chunk_length(32768, 1024) == SHORTEST_CHUNK == 256
    assert chunk_length(1 << 20, 1024) == 1024
    assert chunk_length(1 << 30, 1024) == CHUNK
    op = _op("""
        op nll
          dims B, C
          in  x: f32 [B, C]
          in  t: i64 [B] in 0..C
          out loss: f32 []
          loss[] = mean(i) (log(sum(j) exp(x[i, j])) - x[i, t[i]])
          baseline F.cross_entropy(x, t)
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  B in 1..300, C in 1..50
          bench B=32768, C=4096, dtype=f32
    """)
    lowered = tb._lowered(op)
    part = next(st for stage in lowered.stages for st in stage.statements
                if st.target.endswith("_part"))
    (r,) = part.value.indices
    assert r.hi.args[0].right == ir.Num(256)  # min(s * 256 + 256, B)
    defaults = get("triton").space(op, "cuda").default()
    stage = lowered.stages.index(next(s for s in lowered.stages
                                      if part in s.statements))
    rows = 32768 // 256
    assert rows // defaults[f"s{stage}.BLOCK_R"] >= min(rows, SMS)


def test_independent_reductions_of_one_row_share_a_stage_where_they_share_a_read():
    """A triplet loss's two distances both read the anchor: one pass reads it once. Two
    reductions that read nothing in common keep a stage each."""
    def lowered(second: str):
        return tb._lowered(_op(f"""
            op triplet
              dims B, D
              in  a: f32 [B, D]
              in  p: f32 [B, D]
              in  n: f32 [B, D]
              in  m: f32 [B, D]
              out loss: f32 []
              dp[i] = sqrt(sum(j) (a[i, j] - p[i, j]) ** 2)
              dn[i] = sqrt(sum(j) ({second}) ** 2)
              loss[] = mean(i) max(dp[i] - dn[i] + 1.0, 0.0)
              baseline (torch.sqrt(((a - p) ** 2).sum(1)) - torch.sqrt((({second.replace('[i, j]', '')}) ** 2).sum(1)) + 1.0).clamp(min=0).mean()
              tolerance f32(rtol=1e-4, atol=1e-4)
              test  B in 1..40, D in 1..300
              bench B=4096, D=1024, dtype=f32
        """))
    first = lowered("a[i, j] - n[i, j]").stages[0].statements
    assert [st.target for st in first] == ["kd_r0", "kd_r1"]
    apart = lowered("m[i, j] - n[i, j]").stages[0].statements
    assert [st.target for st in apart] == ["kd_r0"]


def test_reductions_of_one_row_that_feed_each_other_share_a_stage():
    """A log-sum-exp averaged over the batch: the row maximum and the sum of exponentials
    are one stage (one pass over the logits), the batch mean another."""
    op = kspec.parse_text("""
op lse_mean
  dims B, C
  in  x: f32 [B, C]
  in  t: i64 [B] in 0..C
  out loss: f32 []
  m[i] = max(j) x[i, j]
  lse[i] = m[i] + log(sum(j) exp(x[i, j] - m[i]))
  loss[] = mean(i) (lse[i] - x[i, t[i]])
  baseline torch.nn.functional.cross_entropy(x, t)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test B in 1..50, C in 1..300
  bench B=32768, C=4096, dtype=f32
""").ops[0]
    staged = split(op, {"B": 32768, "C": 4096})
    first = staged.stages[0]
    assert sorted(t.name for t in first.outputs) == ["kd_r0", "m"]
    assert all(not any(isinstance(n, ir.Access) and n.tensor == "m"
                       for n in ir.walk(st.value))
               for st in first.statements if st.target == "m")
    # the maximum feeds the sum in the same stage; nothing after reads x by rows again
    assert len(staged.stages) < 4


def _top_level_bindings(src: str) -> list[str]:
    import ast
    out = []
    for node in ast.parse(src).body:
        if isinstance(node, ast.FunctionDef):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return out


def test_every_rendered_module_binds_each_top_level_name_once():
    """A staged module holds each contraction stage's whole module: a name two of them bind
    (an attention's two GEMMs each had ``_row_dims``, ``F32_PREC``, ``STAGED``) was the
    second's in the first's launcher, which then asked for dims it never set."""
    import glob
    from collections import Counter
    triton = get("triton")
    seen = 0
    for path in sorted(glob.glob("specs/*.kspec") + glob.glob("specs/kernelbench/level1/*.kspec")):
        for op in kspec.load(path).ops:
            src = triton.render(op, triton.space(op, "cuda").default(), "cuda")
            twice = [n for n, c in Counter(_top_level_bindings(src)).items() if c > 1]
            assert not twice, (path, twice)
            seen += 1
    assert seen >= 100


def test_sampled_genomes_of_staged_contractions_bind_each_name_once():
    """Each stage's genes (split-K, swap, staging, alignment, the f32 product) change what
    its module binds; sampled genomes of every staged op with a contraction stage render to
    modules that compile, with no top-level name bound twice."""
    import glob
    import random
    from collections import Counter
    triton, rng, seen = get("triton"), random.Random(0), 0
    for path in sorted(glob.glob("specs/*.kspec") + glob.glob("specs/kernelbench/level1/*.kspec")):
        for op in kspec.load(path).ops:
            try:
                lowered = tb._lowered(op)
            except Unsupported:
                continue
            stages = getattr(lowered, "stages", None) or []
            if len(stages) < 2 or "contraction" not in {tb._stage_kind(s) for s in stages}:
                continue
            space = triton.space(op, "cuda")
            for _ in range(8):
                src = triton.render(op, space.sample(rng), "cuda")
                compile(src, path, "exec")
                twice = [n for n, c in Counter(_top_level_bindings(src)).items() if c > 1]
                assert not twice, (path, twice)
                seen += 1
    assert seen >= 8


def test_each_contraction_stage_sets_the_row_dims_of_its_own_factors(tmp_path):
    import importlib.util
    op = kspec.load("specs/kernelbench/level1/97_scaled_dot_product_attention.kspec").ops[0]
    triton = get("triton")
    genome = triton.space(op, "cuda").default()
    contractions = [k for k, s in enumerate(tb._lowered(op).stages)
                    if tb._stage_kind(s) == "contraction"]
    assert all(genome.get(f"s{k}.ALIGN") for k in contractions)  # (what this test needs)
    path = tmp_path / "attention.py"
    path.write_text(triton.render(op, genome, "cuda"))
    spec_ = importlib.util.spec_from_file_location("attention", path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    sizes = {"B": 1, "H": 1, "S": 20, "D": 24}
    first, last = (getattr(mod, f"_row_dims_s{k}")(sizes) for k in (contractions[0],
                                                                       contractions[-1]))
    assert first["ROW_Q"] == first["ROW_K"] == 32  # D, rounded up to 16s
    assert last["ROW_p"] == last["ROW_V"] == 32     # S


def test_a_top_k_read_by_another_statement_is_a_stage_with_its_indices():
    from test_backend_triton import NOVEL  # the router the interpreter runs
    op = _op(NOVEL["topk_router"])
    lowered = tb._lowered(op)
    assert isinstance(lowered, Staged)
    outs = [[t.name for t in s.outputs] for s in lowered.stages]
    assert outs[0] == ["v", "ids"]  # one top-k of each row gives both
    assert [tb._stage_kind(s) for s in lowered.stages][0] == "collective"
    assert sum("ids" in o for o in outs) == 1 and outs[-1] == ["w"]


DECAYED = """
    op decayed
      dims M, N
      in  x: f32 [M, N]
      out y: like x [M, N]
      out z: like x [M, N]
      y[i, j] = sum(k in j .. N) pow(0.9, k - j) * x[i, k]
      z[i, j] = sum(k in 0 .. j) x[i, k] * 2.0 * pow(0.5, j - k)
      baseline (x @ torch.where(torch.arange(x.shape[1], device=x.device)[:, None] >= torch.arange(x.shape[1], device=x.device)[None, :], 0.9 ** (torch.arange(x.shape[1], device=x.device)[:, None] - torch.arange(x.shape[1], device=x.device)[None, :]).clamp(min=0).to(x.dtype), 0.0), x @ torch.where(torch.arange(x.shape[1], device=x.device)[:, None] < torch.arange(x.shape[1], device=x.device)[None, :], 2.0 * 0.5 ** (torch.arange(x.shape[1], device=x.device)[None, :] - torch.arange(x.shape[1], device=x.device)[:, None]).clamp(min=0).to(x.dtype), 0.0))
      tolerance f32(rtol=1e-4, atol=1e-4)
      test  M in 1..8, N in 1..100
      bench M=1024, N=2048, dtype=f32
"""


def test_sums_weighted_by_a_power_of_the_distance_become_decayed_scans():
    """A discounted return (suffix, ``pow(c, k - j)``) and an exclusive moving sum (prefix,
    ``pow(c, j - k)``): each one pass, ``y[j] = c * y[j -+ 1] + x[j]``, not a range a point
    (quadratic: 0.01x of torch on the CPU)."""
    from kdsl.agreement import check_agreement
    from kdsl.backends.lower.scans import ranges_as_scans
    op = _op(DECAYED)
    assert check_agreement(op, per_dtype=2).ok
    scans = [n for st in ranges_as_scans(op).statements for n in ir.walk(st.value)
             if isinstance(n, ir.Scan)]
    assert sorted((s.op, s.factor.value) for s in scans) == [("cumdecay", 0.5),
                                                             ("cumdecay", 0.9)]
    # a power of the distance the other way round (growing toward the point) stays a range
    wrong = _op(DECAYED.replace("pow(0.9, k - j)", "pow(0.9, j - k)"))
    assert sum(isinstance(n, ir.Scan) for st in ranges_as_scans(wrong).statements
               for n in ir.walk(st.value)) == 1


@pytest.mark.parametrize("backend", ["numpy", "torch", "c"])
def test_decayed_scans_are_correct_on_every_cpu_backend(backend):
    from default_kernels import assert_default_kernel_correct
    op = _op(DECAYED)
    if backend == "torch":
        be = get(backend)
        genome = {**be.space(op, "cpu").default(), "mode": "compose"}
        assert "rt.cumdecay(" in be.render(op, genome, "cpu")
        return
    assert_default_kernel_correct(op, backend)


RUNNING_MAX = """
    op running_max
      dims M, N
      in  x: f32 [M, N]
      out y: like x [M, N]
      out z: like x [M, N]
      y[i, j] = max(k in 0 .. j + 1) x[i, k]
      z[i, j] = sum(k in j .. N) x[i, k]
      baseline (torch.cummax(x, dim=1).values, torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1]))
      tolerance f32(rtol=1e-4, atol=1e-4)
      test  M in 1..8, N in 1..100
      bench M=1024, N=2048, dtype=f32
"""


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_array_backends_run_ranged_maxima_and_suffix_sums_as_scans(backend):
    """numpy and torch (composed) render a running maximum written as a ranged max, and a
    suffix sum, as scans: rendered as written each output point held its own range (an
    outsider's running max at M=1024, N=2048 asked numpy for 16 GiB)."""
    from default_kernels import assert_default_kernel_correct
    op = _op(RUNNING_MAX)
    be = get(backend)
    genome = be.space(op, "cpu").default()
    if backend == "torch":
        genome = {**genome, "mode": "compose"}
    src = be.render(op, genome, "cpu")
    assert "rt.cummax(" in src and "rt.cumsum(" in src
    if backend == "numpy":
        assert_default_kernel_correct(op, backend)


FLIPPED = """
    op flipped
      dims M, N
      in  x: f32 [M, N]
      out y: like x [M, N]
      out z: like x [M, N]
      y[i, j] = x[M - 1 - i, N - 1 - j] * 2.0
      z[i, j] = sum(k in j .. N) x[i, k]
      baseline (torch.flip(x, [0, 1]) * 2.0, torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1]))
      tolerance f32(rtol=1e-4, atol=1e-4)
      test  M in 1..8, N in 1..100
      bench M=1024, N=2048, dtype=f32
"""


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_array_backends_read_a_reversed_index_as_a_flip_not_a_gather(backend):
    """``x[M - 1 - i, N - 1 - j]`` (and a suffix sum's flips) is a reversed slice: numpy's
    flip is a view, torch's a copy; neither builds index arrays (KernelBench 91 on numpy
    read its flips as gathers, 474 ms against eager's 17)."""
    from default_kernels import assert_default_kernel_correct
    op = _op(FLIPPED)
    be = get(backend)
    genome = be.space(op, "cpu").default()
    if backend == "torch":
        genome = {**genome, "mode": "compose"}
    src = be.render(op, genome, "cpu")
    flip = "np.flip(" if backend == "numpy" else "torch.flip("
    assert src.count(flip) >= 3 and "rt.axis(" not in src, src
    assert_default_kernel_correct(op, backend, genome=genome)
