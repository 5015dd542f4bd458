"""The Triton backend's ``tiles`` strategy (``backends/triton/window_nd.py``): window
reductions over any number of window dims, recognised from the index notation.

In-process: which ops it claims (and which not), the defaults at the bench sizes, the
kernel's structure. In the interpreter (``TRITON_INTERPRET=1``, one subprocess): the six
KernelBench pooling specs, a depthwise convolution and a min-pool written here with other
names and axis orders, at tiny sizes with stride, padding and dilation, each tile shape
and loop unrolling mode, f32/f16 and bf16 (loaded, then computed in f32), against the
float64 reference.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kdsl import ir
from kdsl import spec as kspec
from kdsl.backends import get

pytest.importorskip("triton")

LEVEL1 = Path(__file__).resolve().parent.parent / "specs" / "kernelbench" / "level1"
POOLS = {n: LEVEL1 / f"{n}.kspec" for n in (
    "41_max_pool1d", "42_max_pool2d", "43_max_pool3d", "44_avg_pool1d", "45_avg_pool2d",
    "46_avg_pool3d", "82_conv_depthwise_2d_square_input_square_kernel")}

# A min-pool over a channels-last input, written with other names, its terms in another
# order and its output axes in another order than the input's: no code knows it.
CHANNELS_LAST = """
    op cl_min_pool
      dims N, HH, WW, CH, KH, KW, SH, SW, PD, DW
      in  img: f32 | bf16 | f16 [N, HH, WW, CH]
      out res: like img [N, CH, (WW + 2 * PD - DW * (KW - 1) - 1) // SW + 1, (HH + 2 * PD - KH) // SH + 1]
      res[n, ch, qw, qh] = min(v in 0 .. KW, u in 0 .. KH) img[n, SH * qh - PD + u, DW * v + qw * SW - PD, ch] pad(inf)
      baseline -F.max_pool2d(-img.permute(0, 3, 1, 2), (KH, KW), stride=(SH, SW), padding=PD, dilation=(1, DW)).transpose(2, 3)
      tolerance exact
      test  N in 1..2, HH in 1..12, WW in 1..12, CH in 1..6, KH in 1..3, KW in 1..3, SH in 1..3, SW in 1..3, PD in 0..1, DW in 1..2 where 2 * PD <= KH, 2 * PD <= KW, KH <= HH + 2 * PD, DW * (KW - 1) + 1 <= WW + 2 * PD
      bench N=16, HH=256, WW=256, CH=64, KH=3, KW=3, SH=2, SW=2, PD=1, DW=1, dtype=f32
    """

# A 1-d max pool whose padding is a where-guard around a read padded with 0 (not -inf):
# the guard is evaluated a tap, the read loaded with the pad as its masked value.
GUARDED = """
    op guarded_max
      dims B, L, KW, S, P, DL, LO
      in  x: f32 | bf16 [B, L]
      out y: like x [B, LO]
      y[b, o] = max(k in 0 .. KW) where(o * S + k * DL - P >= 0 and o * S + k * DL - P < L, x[b, o * S + k * DL - P] pad(0), -inf)
      baseline F.max_pool1d(x[:, None, :], KW, stride=S, padding=P, dilation=DL)[:, 0, :]
      tolerance exact
      test  B in 1..4, L in 1..40, KW in 1..5, S in 1..3, P in 0..2, DL in 1..3, LO in 1..40 where 2 * P <= KW, DL * (KW - 1) + 1 <= L + 2 * P, LO == (L + 2 * P - DL * (KW - 1) - 1) // S + 1
      bench B=64, L=65536, KW=4, S=2, P=1, DL=2, LO=32766, dtype=f32
    """
WRITTEN = {"cl_min_pool": CHANNELS_LAST, "guarded_max": GUARDED}


def _op(path) -> ir.Op:
    return kspec.find_op(kspec.load(path), None)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("window_nd")
    paths = {}
    for name, text in WRITTEN.items():
        paths[name] = folder / f"{name}.kspec"
        paths[name].write_text(textwrap.dedent(text).strip() + "\n")
    return paths


def _tiles(op: ir.Op):
    from kdsl.backends.triton.plan import make_plan
    from kdsl.backends.triton.window_nd import tiles_of
    return tiles_of(op, make_plan(op))


# ---- in-process: recognition, defaults, structure ----------------------------

def test_pools_of_every_dimensionality_are_tiled_along_their_last_two_axes(written):
    for name, path in POOLS.items():
        win = _tiles(_op(path))
        assert win is not None, name
        rank = len(_op(path).tensor("x").shape)
        assert win.tile == (rank - 2, rank - 1), name
    win = _tiles(_op(POOLS["43_max_pool3d"]))
    assert [win.subs[p].out for p in win.windows] == ["od", "oh", "ow"]
    assert win.subs[2].stride == ir.Name("S") and win.subs[2].dil == ir.Name("DL")
    # the channels-last pool: the window along W and the channels (plain) form the tile;
    # the window along H is one row a program, looped over
    win = _tiles(_op(written["cl_min_pool"]))
    assert win.op == "min" and win.tensor == "img"
    assert [(win.subs[p].out, win.subs[p].k is not None) for p in range(4)] == [
        ("n", False), ("qh", True), ("qw", True), ("ch", False)]
    assert win.tile == (2, 3)
    win = _tiles(_op(written["guarded_max"]))  # the guard is the body's, the read a window
    assert win.pads == (ir.Num(0),) and win.tile == (0, 1)


def test_what_is_not_a_window_is_left_to_the_other_strategies():
    def op(body: str, out: str = "y[b, o]") -> ir.Op:
        text = f"""
            op w
              dims B, L, KW, S, LO
              in  x: f32 [B, L]
              in  z: f32 [B, L]
              in  u: f32 [L, L]
              out y: like x [B, LO]
              {out} = {body}
              baseline x
              tolerance f32(rtol=1e-5, atol=1e-5)
              test  B in 1..4, L in 1..50, KW in 1..4, S in 1..3, LO in 1..50
              bench B=4, L=50, KW=3, S=2, LO=20
            """
        return kspec.parse_text(textwrap.dedent(text)).ops[0]
    assert _tiles(op("max(k in 0 .. KW) x[b, o * S + 2 * k - 1] pad(-inf)")) is not None
    assert _tiles(op("sum(k in 0 .. KW) x[b, (o * S + k) % L]")) is None  # not affine
    assert _tiles(op("max(k in 0 .. KW) x[b, o * S + k * o] pad(-inf)")) is None
    w = _tiles(op("max(k in 0 .. KW) x[b, o * S + k + o] pad(-inf)"))  # any affine form
    assert w.subs[1].stride == ir.Binary("+", ir.Name("S"), ir.Num(1))
    assert _tiles(op("max(k in 0 .. KW) u[2 * o, o * S + k] pad(-inf)")) is None  # o twice
    assert _tiles(op("sum(k in 0 .. KW) x[b, o + k] pad(0) * z[b, o + k] pad(0)")) is None
    assert _tiles(op("max(k in 0 .. L) x[b, k] * o")) is None  # no window: a row
    assert _tiles(op("max(k in 0 .. KW) x[b, o * S + k] pad(-inf) + z[b, o * 1] pad(0)")) \
        is not None  # another read, of the tile's axes
    softmax = kspec.load(Path(__file__).resolve().parent.parent / "specs" / "softmax.kspec")
    assert _tiles(kspec.find_op(softmax, None)) is None


def test_defaults_take_tiles_but_for_the_1d_windows_of_window_py():
    be = get("triton")
    picks = {n: be.space(_op(p), "cuda").default() for n, p in POOLS.items()}
    # 1-d without dilation, a stride within the window: the phases strategy (1.01x floor)
    assert picks["44_avg_pool1d"]["reduce"] == "phases"
    assert "tiles" in [g for g in be.space(_op(POOLS["44_avg_pool1d"]), "cuda").genes
                       if g.name == "reduce"][0].values
    for name in ("41_max_pool1d", "42_max_pool2d", "43_max_pool3d", "45_avg_pool2d",
                 "46_avg_pool3d"):
        assert picks[name]["reduce"] == "tiles", name
    # 62 x 62 outputs a plane: 16 x 64, 4 warps (8 outputs a thread, 3% of lanes idle)
    g = picks["43_max_pool3d"]
    assert (g["BLOCK_R"], g["BLOCK_C"], g["num_warps"]) == (16, 64, 4)
    g = picks["45_avg_pool2d"]  # 186 wide: 3 tiles of 64, not 2 of 128
    assert (g["BLOCK_R"], g["BLOCK_C"]) == (16, 64)


def test_the_kernel_decodes_the_program_once_and_steps_taps_by_pointers():
    be = get("triton")
    op = _op(POOLS["43_max_pool3d"])
    src = be.render(op, be.space(op, "cuda").default(), "cuda")
    body = src.split("def _kd_kb43_max_pool3d(", 1)[1].split("\ndef kernel(", 1)[0]
    # no division or modulo but the program id's, once; none per tap
    assert "_kd_floordiv" not in body and "_kd_mod" not in body
    assert body.count(" % ") == 4 and body.count(" // ") == 4 + 2  # (+ tile counts)
    unrolled = body.split("if UNROLL == 2:", 1)[1].split("elif UNROLL == 1:", 1)[0]
    assert unrolled.count("tl.static_range(") == 3 and unrolled.count("tl.load(") == 1
    assert "to(tl.int64)" not in unrolled  # int32 tile offsets inside the loops
    # a tap: the row-and-column mask, the load (padding as its other value), the max
    inner = unrolled.rsplit("tl.static_range(WK4):", 1)[1]
    assert "other=(-float('inf'))" in inner and inner.count("&") == 2
    assert "def kernel(" in src and "WK4 = max((d_KS - 0), 0)" in src


# ---- the interpreter ------------------------------------------------------

WORKER = r'''
import json, sys, traceback
import numpy as np, torch
import kdsl.spec as S
from kdsl import cases, compare, dtypes, reference, sizes as SZ
from kdsl.backends import get
from kdsl.backends.triton import window_nd

def typed(op, name, dt):
    return dtypes.torch_dtype(op.dtype_of(name, dt))

def main(job):
    be, results = get("triton"), []
    for item in job:
        op = S.find_op(S.load(item["path"]), None)
        for taps, inner in item["unroll"]:
            window_nd.UNROLL_TAPS, window_nd.INNER_UNROLL = taps, inner
            for genome in item["genomes"]:
                failures, ran = [], 0
                try:
                    built = be.build(op, be.render(op, genome, "cpu"), "cpu")
                    for k, sizes in enumerate(item["sizes"]):
                        for dt in item["dtypes"]:
                            c = cases.draw(op, cases.Shape(sizes, dt, "tiny", k), 1)
                            # (bf16 inputs: drawn rounded to bf16, loaded as bf16)
                            ins = {n: torch.from_numpy(np.ascontiguousarray(v)).to(typed(op, n, dt))
                                   for n, v in c.inputs.items()}
                            outs = {t.name: torch.full(SZ.shape_of(op, t.name, sizes), float("nan"),
                                                       dtype=typed(op, t.name, dt))
                                    for t in op.outputs}
                            built.fn(ins, outs, dict(sizes))
                            got = {n: v.double().numpy() for n, v in outs.items()}
                            ref = reference.reference(op, sizes, c.inputs)
                            bad = compare.compare(op, dt, got, ref, c.inputs)
                            ran += 1
                            if bad is not None:
                                failures.append(f"{dt} {sizes}: {bad}")
                except Exception:
                    failures.append(traceback.format_exc()[-3000:])
                results.append({"op": op.name, "genome": genome, "unroll": [taps, inner],
                                "cases": ran, "failures": failures})
    print("RESULTS " + json.dumps(results))

main(json.loads(sys.argv[1]))
'''

TINY = {  # stride, padding and dilation; outputs of a few tiles
    "41_max_pool1d": [dict(B=2, C=3, L=23, KW=4, S=2, P=2, DL=3, LO=9),
                      dict(B=1, C=2, L=9, KW=3, S=1, P=1, DL=1, LO=9)],
    "42_max_pool2d": [dict(B=1, C=2, H=9, W=11, KS=3, S=2, P=1, DL=2),
                      dict(B=2, C=1, H=5, W=6, KS=2, S=1, P=1, DL=1)],
    "43_max_pool3d": [dict(B=1, C=2, D=7, H=6, W=9, KS=3, S=2, P=1, DL=2)],
    "44_avg_pool1d": [dict(B=2, C=2, L=20, KW=5, S=3, P=2, LO=7)],
    "45_avg_pool2d": [dict(B=1, C=2, H=13, W=14, KS=3)],
    "46_avg_pool3d": [dict(B=1, C=2, D=6, H=7, W=8, KS=3, S=2, P=1)],
    "82_conv_depthwise_2d_square_input_square_kernel": [dict(B=1, C=3, H=7, W=9, K=3, S=2, P=1)],
    "cl_min_pool": [dict(N=2, HH=7, WW=9, CH=3, KH=3, KW=2, SH=2, SW=1, PD=1, DW=2)],
    "guarded_max": [dict(B=2, L=17, KW=4, S=2, P=2, DL=2, LO=8)],
}
SMALL_TILES = {"reduce": "tiles", "BLOCK_R": 2, "BLOCK_C": 4, "num_warps": 1}


@pytest.fixture(scope="module")
def interpreted(written):
    """Runs every case in one interpreter subprocess; returns its results."""
    from kdsl.backends.triton.window_nd import INNER_UNROLL, UNROLL_TAPS
    paths = dict(POOLS, **written)
    job = []
    for name, sizes in TINY.items():
        dts = [d for d in _op(paths[name]).dtype_choices]
        # all unrolled (the default), the innermost dim alone, none
        unroll = [[UNROLL_TAPS, INNER_UNROLL]]
        if name in ("43_max_pool3d", "46_avg_pool3d", "cl_min_pool", "41_max_pool1d"):
            unroll += [[1, INNER_UNROLL], [1, 1]]
        job.append({"path": str(paths[name]), "sizes": sizes, "dtypes": dts,
                    "genomes": [{"reduce": "tiles"}, SMALL_TILES], "unroll": unroll})
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", WORKER, json.dumps(job)], env=env,
                          capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULTS "):
            return json.loads(line[len("RESULTS "):])
    raise AssertionError(f"the interpreter worker printed no results:\n{proc.stderr[-4000:]}")


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiles_match_the_reference_in_the_interpreter(interpreted, name):
    want = name if name in WRITTEN else _op(POOLS[name]).name
    rows = [r for r in interpreted if r["op"] == want]
    assert rows, f"no results for {want}"
    for r in rows:
        assert r["cases"] > 0 and not r["failures"], (r["genome"], r["unroll"], r["failures"])
