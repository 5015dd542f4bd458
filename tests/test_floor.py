"""The memory-traffic floor counts what a correct kernel must touch: rows gathered, ranges
read (the last T events of each segment), outputs; a CPU floor charges the bytes beyond
the caches at a bandwidth measured beyond them, and those inside at a rate measured inside
them (never 0 where bytes move). A correct kernel that reads a subset is believed; one
that skips work is still flagged, with both figures."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

from fake_backend import QUICK, load
from kdsl import cases, spec
from kdsl.search.eval import floor, timing

# KernelEvolve's 9.8x op: of each segment only the last T events, oldest first, padded
# with 0 on the left where a segment is shorter. A kernel reads B x T rows, not L.
LAST_T = """\
op jagged_last_t
  dims L, D, B, T
  in  values: f32 | bf16 | f16 [L, D]
  in  offsets: i64 [B + 1] offsets(L)
  out y: like values [B, T, D]
  y[b, t, d] = where(offsets[b + 1] - T + t >= offsets[b], values[offsets[b + 1] - T + t, d] pad(0), 0)
  baseline torch.where((offsets[1:, None] - T + torch.arange(T, device=offsets.device) >= offsets[:-1, None])[..., None], values[(offsets[1:, None] - T + torch.arange(T, device=offsets.device)).clamp(0, L - 1)], torch.zeros((), dtype=values.dtype, device=values.device))
  tolerance exact
  test  L in 1..2000, D in 1..64, B in 1..100, T in 1..50
  bench cpu: L=65536, D=64, B=256, T=8, dtype=f32
"""

# A static sub-range: the last W of N, known from the IR alone, no data needed.
TAIL = """\
op tail
  dims N, W
  in  x: f32 [N]
  out y: like x [W]
  y[i] = x[N - W + i]
  baseline x[N - W:]
  tolerance exact
  test  N in 1..500, W in 1..500 where W <= N
  bench cpu: N=1000000, W=1000
"""

CONFIG = dataclasses.replace(QUICK, time=True, warmup=1, reps=3, slow_cutoff=None)


def last_t():
    return spec.parse_text(LAST_T, "last_t.kspec").ops[0]


def last_t_kernel(inputs, outputs, sizes):
    """Correct, and reads only the rows it keeps: B x T of them."""
    off, t = inputs["offsets"].numpy(), sizes["T"]
    pos = off[1:, None] - t + np.arange(t)
    rows = torch.from_numpy(np.clip(pos, 0, max(sizes["L"] - 1, 0)))
    got = inputs["values"][rows]
    got[torch.from_numpy(pos < off[:-1, None])] = 0
    outputs["y"].copy_(got)


def skipping_kernel(inputs, outputs, sizes):
    """Writes every element and nothing right: the floor is its only judge in these tests."""
    outputs["y"].zero_()


class FakeTimer:
    """The baseline's samples first, then the candidate's (probe and reps alike)."""

    def __init__(self, kernel_ms: float, baseline_ms: float = 50.0):
        self.kernel_ms, self.baseline_ms, self.calls = kernel_ms, baseline_ms, 0

    def __call__(self, fn, warmup, reps, setup=None):
        for _ in range(warmup + reps):
            if setup:
                setup()
            fn()
        self.calls += 1
        return [self.baseline_ms if self.calls == 1 else self.kernel_ms] * reps


# ---- what is counted ---------------------------------------------------------------

def test_the_floor_counts_only_the_last_t_rows_of_each_segment():
    op = last_t()
    sizes = {"L": 100, "D": 4, "B": 3, "T": 5}
    offsets = np.array([0, 2, 50, 100])  # a segment shorter than T, two longer
    inputs = {"values": np.zeros((100, 4), np.float32), "offsets": offsets}
    rows = 2 + 5 + 5
    assert floor.touched(op, sizes, inputs) == {"values": rows * 4, "offsets": 4}
    assert floor.traffic_bytes(op, sizes, "f32", inputs) == rows * 4 * 4 + 4 * 8 + 3 * 5 * 4 * 4
    assert floor.traffic_bytes(op, sizes, "f16", inputs) == rows * 4 * 2 + 4 * 8 + 3 * 5 * 4 * 2
    # without the offsets the rows read are not known: all of them count
    assert floor.touched(op, sizes)["values"] == 100 * 4
    assert floor.allocated_bytes(op, sizes, "f32") == 100 * 4 * 4 + 4 * 8 + 3 * 5 * 4 * 4


def test_one_segment_spanning_everything_reads_t_rows():
    op = last_t()
    sizes = {"L": 1000, "D": 2, "B": 2, "T": 7}
    inputs = {"offsets": np.array([0, 0, 1000])}  # an empty segment, then all of L
    assert floor.touched(op, sizes, inputs)["values"] == 7 * 2


def test_a_static_sub_range_is_bounded_by_the_ir_without_any_data():
    op = spec.parse_text(TAIL, "tail.kspec").ops[0]
    assert floor.touched(op, {"N": 10 ** 6, "W": 1000}) == {"x": 1000}
    assert floor.traffic_bytes(op, {"N": 10 ** 6, "W": 1000}, "f32") == 2 * 1000 * 4


def test_gathered_rows_count_once_each_and_plain_reads_in_full():
    op = load("embedding_bag_sum")
    sizes = {"V": 50, "D": 3, "B": 2, "L": 6}
    inputs = {"idx": np.array([4, 4, 9, 4, 9, 1]), "offsets": np.array([0, 4, 6])}
    assert floor.touched(op, sizes, inputs) == {"table": 3 * 3, "idx": 6, "offsets": 3}
    # only the rows of bags: indices past the last offset are never read
    inputs["offsets"] = np.array([0, 1, 2])
    assert floor.touched(op, sizes, inputs) == {"table": 1 * 3, "idx": 2, "offsets": 3}
    swiglu = load("swiglu")
    assert floor.touched(swiglu, {"M": 4, "N": 8}) == {"a": 32, "b": 32}


def test_library_specs_count_every_input_byte_but_the_subset_readers():
    """The gather (embedding_bag_sum), the truncation (jagged_to_padded_dense) and a
    strided window whose last stride stops short of the end (max_pool1d, L=33 KW=9 S=4:
    x[..., 32] is never read) count less than every byte; the rest count every byte."""
    for path in sorted(spec.library_dir().glob("*.kspec")):
        op = spec.load(path).ops[0]
        subset = op.name in ("embedding_bag_sum", "jagged_to_padded_dense", "max_pool1d")
        for c in cases.generate(op, 0, per_dtype=3, dtype_list=op.dtype_choices[:1]):
            got = floor.traffic_bytes(op, c.sizes, c.dtype, c.inputs)
            full = floor.allocated_bytes(op, c.sizes, c.dtype)
            assert got <= full if subset else got == full, (op.name, c.sizes)
            if op.name != "max_pool1d":  # (the window is static: no data needed)
                assert floor.traffic_bytes(op, c.sizes, c.dtype) == full, op.name
    op = load("max_pool1d")
    sizes = {"B": 1, "C": 1, "L": 33, "KW": 9, "S": 4, "P": 1, "LO": 7}
    assert floor.touched(op, sizes) == {"x": 32}


def test_a_bench_point_of_a_million_gathers_is_counted_in_a_second_or_two():
    op = load("embedding_bag_sum")
    sizes = {"V": 10_000_000, "D": 128, "B": 65536, "L": 1_310_720}  # the H200 point
    rng = np.random.default_rng(0)
    inputs = {"idx": rng.integers(0, sizes["V"], sizes["L"]),
              "offsets": np.concatenate([[0], np.sort(rng.integers(0, sizes["L"], 65535)),
                                         [sizes["L"]]])}
    start = time.perf_counter()
    got = floor.touched(op, sizes, inputs)
    assert time.perf_counter() - start < 4.0  # 0.25 s alone on a 2-core VM
    assert got["table"] == len(np.unique(inputs["idx"])) * 128


# ---- the verdict -------------------------------------------------------------------

def test_a_correct_kernel_reading_the_last_t_events_is_believed(monkeypatch):
    """Between the floor of what it reads and the old floor of every input byte."""
    monkeypatch.setattr(timing, "_ORACLES", {})
    monkeypatch.setattr(floor, "_BENCH_TRAFFIC", {})
    op = last_t()
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    read = floor.traffic_bytes(op, case.sizes, "f32", case.inputs)
    every = floor.allocated_bytes(op, case.sizes, "f32")
    assert every > 10 * read
    kernel_ms = 3 * read / 1e9 * 1e3  # three times its floor at 1 GB/s
    assert kernel_ms < floor.SUSPECT_FRACTION * every / 1e9 * 1e3  # the old floor's verdict
    t = timing.measure(op, last_t_kernel, CONFIG, timer=FakeTimer(kernel_ms), bandwidth=1e9,
                       baselines={})
    assert t.message is None, t.message
    assert t.artifacts["suspect"] is False and t.artifacts["bytes"] == read
    assert floor.verdict(kernel_ms, read, 1e9, "cuda") is None


def test_the_correct_kernel_timed_for_real_on_this_cpu_is_not_suspect(monkeypatch):
    monkeypatch.setattr(timing, "_ORACLES", {})
    monkeypatch.setattr(floor, "_BENCH_TRAFFIC", {})
    op = last_t()
    t = timing.measure(op, last_t_kernel, CONFIG, baselines={})
    assert t.message is None, t.message
    nbytes, bw = t.artifacts["bytes"], t.artifacts["bandwidth_gbs"] * 1e9
    assert floor.verdict(t.time_ms, nbytes, bw, "cpu") is None
    assert floor.verdict(t.time_ms, nbytes, bw, "cuda") is None  # not even without caches


def test_a_kernel_that_skips_the_work_is_still_flagged(monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)  # the point counts in full
    monkeypatch.setattr(timing, "_ORACLES", {})
    monkeypatch.setattr(floor, "_BENCH_TRAFFIC", {})
    op = last_t()
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    read = floor.traffic_bytes(op, case.sizes, "f32", case.inputs)
    fast_ms = 0.1 * read / 1e9 * 1e3  # a tenth of the floor of what it must read
    t = timing.measure(op, last_t_kernel, CONFIG, timer=FakeTimer(fast_ms), bandwidth=1e9,
                       baselines={})
    assert t.artifacts["suspect"] is True and t.message.startswith("suspect: ")
    message = floor.verdict(fast_ms, read, 1e9, "cuda")
    floor_ms = read / 1e9 * 1e3
    assert message.startswith(f"suspect: {fast_ms:.4g} ms is faster than the memory-traffic "
                              f"floor {floor_ms:.4g} ms")
    assert f"{read / 1e6:.4g} MB" in message and "1 GB/s" in message
    # wrong values are the correctness stage's: at the bench point too, before any floor
    t = timing.measure(op, skipping_kernel, CONFIG, timer=FakeTimer(fast_ms), bandwidth=1e9,
                       baselines={})
    assert t.message.startswith("wrong at the bench point")


# ---- the CPU: caches ---------------------------------------------------------------

def test_a_cpu_floor_charges_the_bytes_beyond_the_caches_at_the_copy_bandwidth(monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 32 << 20)
    monkeypatch.setattr(floor, "cache_bandwidth", lambda: 100e9)  # inside: 2 x 100 GB/s
    bw = 10e9  # bytes/s beyond the caches
    # a 33 MB point inside a 32 MiB L3 (33.5 MB) runs at cache speed, charged at it
    assert floor.floor_ms(33_000_000, bw, "cpu") == pytest.approx(33_000_000 / 200e9 * 1e3)
    assert floor.verdict(0.5, 33_000_000, bw, "cpu") is None
    # the GPU's timer flushes L2: all of it counts there, at the copy bandwidth
    assert floor.verdict(0.5, 33_000_000, bw, "cuda").startswith("suspect: 0.5 ms")
    # a point far beyond the caches: what cannot stay in them at the copy bandwidth
    big = 1_000_000_000
    inside = 32 << 20
    assert floor.floor_ms(big, bw, "cpu") == pytest.approx(
        (big - inside) / bw * 1e3 + inside / 200e9 * 1e3)
    message = floor.verdict(10.0, big, bw, "cpu")
    assert message.startswith("suspect: 10 ms is faster than the memory-traffic floor 96.")
    assert "beyond the caches' 33.55 MB at 10 GB/s" in message and "1000 MB" in message
    assert "the rest at 200 GB/s inside them" in message
    assert floor.verdict(90.0, big, bw, "cpu") is None


def test_a_cpu_point_inside_the_caches_has_a_floor(monkeypatch):
    """An outsider's bincount (8.4 MB), one_hot (33.6 MB), rope, attention points on a
    CPU with 35.7 MB of L2 + L3 printed 'memory floor 0 ms': every byte was inside the
    caches, and those were not charged at all. They are, at the rate inside the caches."""
    monkeypatch.setattr(floor, "cache_bytes", lambda: 32 << 20)
    monkeypatch.setattr(floor, "cache_bandwidth", lambda: 150e9)
    nbytes = 8_391_680
    assert floor.floor_ms(nbytes, 12e9, "cpu") == pytest.approx(nbytes / 300e9 * 1e3)
    message = floor.verdict(0.001, nbytes, 12e9, "cpu")
    assert message.startswith("suspect: 0.001 ms is faster than the memory-traffic floor "
                              "0.02797 ms (8.392 MB read and written, all inside the caches' "
                              "33.55 MB, at 300 GB/s inside them)")
    assert floor.verdict(0.03, nbytes, 12e9, "cpu") is None
    # the rate inside is never below the one beyond (a slow measurement by bad luck)
    monkeypatch.setattr(floor, "cache_bandwidth", lambda: 1e9)
    assert floor.floor_ms(nbytes, 12e9, "cpu") == pytest.approx(nbytes / 12e9 * 1e3)
    assert floor.floor_ms(0, 12e9, "cpu") == 0.0


BINCOUNT = """\
op bincount
  dims N, NB
  in  idx: i64 [N] in 0..NB
  out h: i64 [NB]
  h[c] = sum(i) (idx[i] == c)
  baseline torch.bincount(idx, minlength=NB)
  tolerance exact
  test  N in 1..500, NB in 1..30
  bench cpu: N=262144, NB=256, dtype=i64
"""


def bincount_kernel(inputs, outputs, sizes):
    outputs["h"].copy_(torch.bincount(inputs["idx"], minlength=sizes["NB"]))


def test_an_integer_point_inside_the_caches_is_judged_against_its_floor(monkeypatch):
    """The timing stage reports the floor of a 2 MB integer point, and flags a time under
    it (the bytes are counted: idx read, h written)."""
    monkeypatch.setattr(floor, "cache_bytes", lambda: 32 << 20)
    monkeypatch.setattr(floor, "cache_bandwidth", lambda: 100e9)
    monkeypatch.setattr(timing, "_ORACLES", {})
    monkeypatch.setattr(floor, "_BENCH_TRAFFIC", {})
    op = spec.parse_text(BINCOUNT, "bincount.kspec").ops[0]
    nbytes = 262144 * 8 + 256 * 8
    t = timing.measure(op, bincount_kernel, CONFIG, timer=FakeTimer(1.0), bandwidth=1e10,
                       baselines={})
    assert t.message is None and t.artifacts["bytes"] == nbytes
    assert t.artifacts["floor_ms"] == pytest.approx(nbytes / 200e9 * 1e3)
    fast = 0.1 * nbytes / 200e9 * 1e3
    t = timing.measure(op, bincount_kernel, CONFIG, timer=FakeTimer(fast), bandwidth=1e10,
                       baselines={})
    assert t.artifacts["suspect"] is True and t.message.startswith("suspect: ")


# Top-1 routing: each token copies its best expert's row. The row is chosen by a value
# the kernel computes, so a correct kernel reads T rows of the table, not E.
ROUTE = """\
op route
  dims T, E, D
  in  logits: f32 [T, E]
  in  table: f32 [E, D]
  out y: like logits [T, D]
  e[t] = argmax(k) logits[t, k]
  y[t, d] = table[e[t], d] pad(0)
  baseline table[logits.argmax(dim=1)]
  tolerance exact
  test  T in 1..8, E in 1..64, D in 1..64
  bench cpu: T=4, E=2048, D=1024, dtype=f32
"""


def route_kernel(inputs, outputs, sizes):
    outputs["y"].copy_(inputs["table"][inputs["logits"].argmax(dim=1)])


def test_a_gather_through_an_index_the_kernel_computes_is_not_charged_whole(monkeypatch):
    """The table (8.4 MB, inside the caches) was counted whole: at 200 GB/s a 0.042 ms
    floor for an honest kernel that reads four of its rows in about 0.01 ms; rejected.
    (Beyond the caches, E=8192 D=4096, an honest C kernel timed 0.42 ms against a 5.4 ms
    floor on the 2-core VM.) Which rows a computed index reaches is not known: none count."""
    op = spec.parse_text(ROUTE, "route.kspec").ops[0]
    assert floor.touched(op, {"T": 4, "E": 2048, "D": 1024}) == {"logits": 4 * 2048,
                                                                  "table": 0}
    monkeypatch.setattr(floor, "cache_bytes", lambda: 32 << 20)
    monkeypatch.setattr(floor, "cache_bandwidth", lambda: 100e9)
    monkeypatch.setattr(timing, "_ORACLES", {})
    monkeypatch.setattr(floor, "_BENCH_TRAFFIC", {})
    t = timing.measure(op, route_kernel, CONFIG, timer=FakeTimer(0.01), bandwidth=1e10,
                       baselines={})
    assert t.message is None, t.message
    assert t.artifacts["suspect"] is False
    assert t.artifacts["bytes"] == (4 * 2048 + 4 * 1024) * 4  # logits read, y written


def test_reads_differing_in_two_groups_count_no_more_than_they_touch():
    """x[i, 0] + x[0, i] reads 2N - 1 elements; the product of the groups' unions counted
    N x N (a 4 MB floor for 16 KB read, N=1024). Now the larger read, a lower bound."""
    op = spec.parse_text(BORDER, "border.kspec").ops[0]
    assert floor.touched(op, {"N": 1024}) == {"x": 1024}
    # alike but for one group, the union is exact: the first and last column
    two = spec.parse_text(BORDER.replace("x[0, i]", "x[i, N - 1]"), "cols.kspec").ops[0]
    assert floor.touched(two, {"N": 1024}) == {"x": 2 * 1024}


BORDER = """\
op border
  dims N
  in  x: f32 [N, N]
  out y: like x [N]
  y[i] = x[i, 0] + x[0, i]
  baseline x[:, 0] + x[0, :]
  tolerance exact
  test  N in 1..64
  bench cpu: N=1024, dtype=f32
"""


def test_honest_work_inside_the_caches_timed_for_real_is_not_under_the_floor():
    """A threaded copy, a threaded read-only sum and a single-threaded add of buffers
    inside this machine's caches, their fastest runs, against the real rates."""
    bw = floor.copy_bandwidth("cpu")
    n = min(floor.cache_bytes() // 4, 16 << 20) // 4  # f32 elements
    a, b = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    x, y, z = a.numpy(), b.numpy(), out.numpy()
    for fn, moved in ((lambda: out.copy_(a), 8 * n), (lambda: a.sum(), 4 * n),
                      (lambda: np.add(x, y, out=z), 12 * n)):
        best = min(timing.default_timer("cpu")(fn, warmup=5, reps=50))
        assert floor.verdict(best, moved, bw, "cpu") is None, (best, moved)
        assert floor.floor_ms(moved, bw, "cpu") > 0


def test_the_cpu_bandwidth_is_measured_on_buffers_larger_than_the_caches(monkeypatch):
    moved, inside = [], []
    monkeypatch.setattr(floor, "cache_bytes", lambda: 32 << 20)
    monkeypatch.setattr(floor, "_measure_copy", lambda device, n: moved.append(n) or 1e10)
    monkeypatch.setattr(floor, "_measure_cache_copy", lambda: inside.append(1) or 9e10)
    monkeypatch.setattr(floor, "_BANDWIDTH", {})
    assert floor.copy_bandwidth("cpu", 1 << 20) == 1e10
    assert floor.copy_bandwidth("cpu", 1 << 30) == 1e10  # once a process, whatever the size
    assert moved == [floor.cpu_copy_bytes()] and moved[0] // 2 >= 2 * (32 << 20)
    assert inside == [1] and floor.cache_bandwidth() == 9e10  # measured with it, once
    monkeypatch.setattr(floor, "_measure_cache_copy", lambda: 8e10)
    floor.copy_bandwidth("cpu", fresh=True)  # measured again: the fastest is kept
    assert floor.cache_bandwidth() == 9e10 and floor.in_cache_rate(1e10) == 1.8e11
    monkeypatch.setattr(floor, "cache_bytes", lambda: 1 << 40)
    assert floor.cpu_copy_bytes() == 1 << 30  # capped


def test_cache_sizes_come_from_sysfs_each_shared_cache_once(tmp_path, monkeypatch):
    def cache(cpu, index, level, kind, size, shared):
        d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
        d.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size),
                           ("shared_cpu_list", shared)):
            (d / name).write_text(f"{text}\n")

    for cpu in (0, 1):
        cache(cpu, 0, 1, "Data", "32K", str(cpu))
        cache(cpu, 1, 1, "Instruction", "32K", str(cpu))
        cache(cpu, 2, 2, "Unified", "1024K", str(cpu))
        cache(cpu, 3, 3, "Unified", "32768K", "0-1")
    monkeypatch.setattr(floor, "SYSFS_CPU", tmp_path)
    floor._cache_bytes.cache_clear()
    try:
        assert floor.cache_bytes() == 2 * (1 << 20) + (32 << 20)
        monkeypatch.setattr(floor, "SYSFS_CPU", tmp_path / "none")
        monkeypatch.setattr(floor.os, "sysconf_names", {}, raising=False)
        floor._cache_bytes.cache_clear()
        assert floor.cache_bytes() == floor.CACHE_FALLBACK
    finally:
        floor._cache_bytes.cache_clear()
    assert floor.cache_bytes() > 0  # this machine's, read for real
