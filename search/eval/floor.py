"""The memory-traffic floor: the least time the bytes an op must touch can take.

The bytes (``traffic_bytes``) are every output in full and, of each input, the elements
some read of it touches (``touched``): the rows a gather reaches, the ranges a read covers
(the last T events of each segment, not the whole segment). They come from evaluating
each read's subscripts over the index ranges the IR gives them and, where those depend
on data (offsets, indices), over the bench inputs themselves. The rate is the machine's
copy bandwidth: on CUDA one large device-to-device copy (the timer flushes L2 before each
run); on CPU a copy of buffers larger than the caches for the bytes beyond what the caches
hold, and the bytes the caches may keep between timed runs (a 33 MB point in a 32 MiB L3)
at ``CACHE_RATE_MARGIN`` times the fastest copy measured inside the caches
(``cache_bandwidth``): a point inside the caches has a floor too, never 0 where bytes move.
A time under ``SUSPECT_FRACTION`` of the floor is not believed (``verdict``).
"""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kdsl import cases, dtypes, ir
from kdsl.reference import Reference, _Scope
from kdsl.sizes import shape_of

from .cuda_timer import CudaTimer
from .timers import CpuTimer

CUDA_COPY_BYTES = 1 << 30
SUSPECT_FRACTION = 0.9

_BENCH_TRAFFIC: dict[tuple, int] = {}


def bench_traffic_bytes(op: ir.Op, case: cases.Case) -> int:
    """``traffic_bytes`` of the process's bench case, counted once (distinct gathered rows
    of a million indices took most of a second an evaluation, in the device lock)."""
    key = (op.hash, tuple(case.sizes.items()), case.dtype)
    if key not in _BENCH_TRAFFIC:
        _BENCH_TRAFFIC[key] = traffic_bytes(op, case.sizes, case.dtype, case.inputs)
    return _BENCH_TRAFFIC[key]


def traffic_bytes(op: ir.Op, sizes: dict[str, int], dtype: str,
                  inputs: dict | None = None) -> int:
    """The bytes the op must move: every output, and the elements of each input that some
    read touches (``touched``; without ``inputs``, reads that depend on data count whole)."""
    seen = touched(op, sizes, inputs)
    total = 0
    for t in (*op.inputs, *op.outputs):
        n = seen[t.name] if t.role == "in" else _size(op, t.name, sizes)
        total += n * dtypes.ITEMSIZE[op.dtype_of(t.name, dtype)]
    return total


def allocated_bytes(op: ir.Op, sizes: dict[str, int], dtype: str, tensors=None) -> int:
    """Every input and output in full (or every one of ``tensors``): what a point occupies
    in memory, read or not."""
    return sum(_size(op, t.name, sizes) * dtypes.ITEMSIZE[op.dtype_of(t.name, dtype)]
               for t in (tensors if tensors is not None else (*op.inputs, *op.outputs)))


def _size(op: ir.Op, name: str, sizes: dict[str, int]) -> int:
    return int(np.prod(shape_of(op, name, sizes), dtype=np.int64))


def gathered_by(op: ir.Op) -> dict[str, str]:
    """Input tensors whose every read indexes dim 0 through another input: table -> idx."""
    reads: dict[str, set] = {}
    for st in op.statements:
        for e in ir.walk(st.value):
            if isinstance(e, ir.Access):
                first = e.subscripts[0] if e.subscripts else None
                via = first.tensor if isinstance(first, ir.Access) else None
                reads.setdefault(e.tensor, set()).add(via)
    inputs = {t.name for t in op.inputs}
    return {name: next(iter(v)) for name, v in reads.items()
            if name in inputs and len(v) == 1 and next(iter(v)) in inputs}


# ---- what the reads touch ----------------------------------------------------

LANES_AT_ONCE = 1 << 22  # index tuples evaluated together (memory)
LANES_AT_MOST = 1 << 27  # index tuples one group of a read may take; past it: counted whole
JOINT_AT_MOST = 1 << 26  # positions a joint bitmap of several dims may have; past it: per dim


@dataclass(frozen=True)
class _Read:
    """One read of an input: the ranges of the indices around it (outermost first) and the
    ``where`` conditions it sits under, with the branch it is in."""
    access: ir.Access
    bound: tuple[ir.IndexRange, ...]
    guards: tuple[tuple[ir.Expr, bool], ...]


class _Unknown(Exception):
    """A subscript, range or condition that cannot be evaluated here (it reads an
    intermediate, or data the caller did not pass)."""


class _Computed(_Unknown):
    """A subscript, range or condition that reads a tensor the kernel computes (an
    intermediate or an output): which positions the read picks is not known before the
    kernel runs, so the floor counts none of them (``table[argmax(k) logits[t, k], d]``
    reads one row of the table, not all of it)."""


def touched(op: ir.Op, sizes: dict[str, int], inputs: dict | None = None) -> dict[str, int]:
    """Per input, how many of its elements some read touches (at most all of them).

    A read's subscripts are evaluated over every index tuple their ranges allow, under the
    ``where`` branch and the padding that guard it. Dims whose subscripts share no index
    are independent and counted apart, their counts multiplied: ``table[idx[i], d]`` is
    (rows idx reaches) x D without evaluating L x D tuples. Reads of one tensor are
    unioned group by group where they group alike and differ in one group at most, else
    counted as the largest of them: a floor must never be above what a correct kernel can
    reach (``x[i, 0] + x[0, i]`` reads 2N - 1 elements, not the N x N the product of the
    groups' unions gives). A read whose positions depend on values the kernel computes
    counts none (``_Computed``)."""
    reads, whole = _reads(op)
    env = _Inputs(inputs, {st.target for st in op.statements})
    out = {}
    for t in op.inputs:
        shape = shape_of(op, t.name, sizes)
        full = int(np.prod(shape, dtype=np.int64))
        mine = [r for r in reads if r.access.tensor == t.name]
        if t.name in whole or full == 0:
            out[t.name] = full if mine or t.name in whole else 0
            continue
        prints = [f for f in (_footprint(op, sizes, env, r, shape) for r in mine)
                  if f is not None]
        out[t.name] = min(_count(_union(prints, shape), shape), full) if prints else 0
    return out


def _reads(op: ir.Op) -> tuple[list[_Read], set[str]]:
    """Every read of an input, and the inputs named whole (``segment_of(offsets, i)``)."""
    inputs = {t.name for t in op.inputs}
    reads: list[_Read] = []
    whole: set[str] = set()

    def visit(e, bound, guards):
        if isinstance(e, ir.Access):
            if e.tensor in inputs:
                reads.append(_Read(e, bound, guards))
            for s in (*e.subscripts, *([e.pad] if e.pad is not None else [])):
                visit(s, bound, guards)
        elif isinstance(e, ir.Name):
            if e.name in inputs:
                whole.add(e.name)
        elif isinstance(e, ir.Call) and e.fn == "where" and len(e.args) == 3:
            cond, a, b = e.args
            visit(cond, bound, guards)
            visit(a, bound, guards + ((cond, True),))
            visit(b, bound, guards + ((cond, False),))
        elif isinstance(e, ir.Reduce):
            inner = bound
            for r in e.indices:
                for x in (r.lo, r.hi):
                    if x is not None:
                        visit(x, inner, guards)
                inner = inner + (r,)
            visit(e.body, inner, guards)
        elif isinstance(e, ir.Collective):
            r = e.index
            for x in (r.lo, r.hi, e.k):
                if x is not None:
                    visit(x, bound, guards)
            visit(e.body, bound + (r,) if r.lo is not None else bound, guards)
        elif isinstance(e, ir.Scan):
            visit(e.body, bound, guards)
        elif isinstance(e, ir.Unary):
            visit(e.operand, bound, guards)
        elif isinstance(e, ir.Binary):
            visit(e.left, bound, guards)
            visit(e.right, bound, guards)
        elif isinstance(e, ir.Call):
            for a in e.args:
                visit(a, bound, guards)

    for st in op.statements:
        target = op.tensor(st.target)
        around = []
        for p, name in enumerate(st.indices):
            r = st.ranges[p] if p < len(st.ranges) else None
            around.append(r if r is not None and r.lo is not None else
                          ir.IndexRange(name, ir.Num(0), target.shape[p]))
        visit(st.value, tuple(around), ())
    return reads, whole


class _Inputs(dict):
    """The inputs a subscript may read, as given; anything else is ``_Unknown``."""

    def __init__(self, given: dict | None, computed=frozenset()):
        super().__init__()
        self.given = given or {}
        self.computed = computed  # the tensors the kernel computes

    def __missing__(self, name: str):
        if name not in self.given:
            raise (_Computed if name in self.computed else _Unknown)(name)
        self[name] = a = np.asarray(self.given[name])
        return a


def _names(e: ir.Expr) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}


def _footprint(op, sizes, env, read: _Read, shape) -> list | None:
    """The read's footprint as [(dims, bitmap over those dims jointly, or None: all)], one
    entry per group of dims that share indices; None when it touches nothing."""
    scope: dict[str, ir.IndexRange] = {}
    for r in read.bound:  # an inner index shadows an outer one of the same name
        scope.pop(r.name, None)
        scope[r.name] = r

    def closure(names: set[str]) -> set[str]:
        out, todo = set(), [n for n in names if n in scope]
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                todo += [m for m in _names(scope[n].lo) | _names(scope[n].hi)
                         if m in scope and m not in out]
        return out

    items = [("dim", p, closure(_names(s))) for p, s in enumerate(read.access.subscripts)]
    items += [("guard", g, closure(_names(g[0]))) for g in read.guards]
    groups: list[tuple[list, set]] = []  # (items, their indices), by shared indices
    for item in items:
        merged = [g for g in groups if g[1] & item[2]]
        joined = ([item], set(item[2]))
        for g in merged:
            groups.remove(g)
            joined = (joined[0] + g[0], joined[1] | g[1])
        groups.append(joined)
    out = []
    for members, names in groups:
        dims = tuple(sorted(p for kind, p, _ in members if kind == "dim"))
        order = [scope[n] for n in scope if n in names]
        try:
            hit = _evaluate(op, sizes, env, read, members, dims, order, shape)
        except _Computed:
            return None  # the positions depend on the kernel's own values: none counted
        except (_Unknown, _TooMany, KeyError, IndexError, ValueError, TypeError):
            hit = None  # counted whole
        if hit is not None and not hit.any():
            return None  # some group is never reached: the read touches nothing
        if dims:
            out.append((dims, hit))
    return sorted(out, key=lambda entry: entry[0])


class _TooMany(Exception):
    pass


def _evaluate(op, sizes, env, read, members, dims, order, shape) -> np.ndarray:
    """The bitmap of the positions of ``dims`` (jointly) this group of the read reaches;
    a one-element bitmap for a group of conditions only."""
    extent = [shape[p] for p in dims]
    joint = int(np.prod(extent, dtype=np.int64)) if dims else 1
    if joint > JOINT_AT_MOST:
        raise _TooMany  # (the caller counts the dims whole)
    hit = np.zeros(joint, dtype=bool)
    ref = Reference(op, sizes)
    ref.env, ref.lhs = env, ()
    subs = [read.access.subscripts[p] for p in dims]
    guards = [g for kind, g, _ in members if kind == "guard"]
    padded = read.access.pad is not None
    spent = [0]
    for lanes, n in _lanes(ref, order, spent):
        sc = _Scope(1, lanes, True)
        keep = np.ones(n, dtype=bool)
        for cond, branch in guards:
            c = np.broadcast_to(np.asarray(ref.eval(cond, sc), dtype=bool), (n,))
            keep &= c if branch else ~c
        pos = []
        for s, size in zip(subs, extent):
            v = np.broadcast_to(np.asarray(ref.eval(s, sc), dtype=np.int64), (n,))
            if padded:  # a padded read outside the tensor reads nothing
                keep &= (v >= 0) & (v < size)
            pos.append(np.clip(v, 0, max(size - 1, 0)))
        if not dims:
            hit[0] |= bool(keep.any())
        else:
            flat = np.ravel_multi_index(pos, extent) if len(pos) > 1 else pos[0]
            hit[flat[keep]] = True
    return hit.reshape(extent) if dims else hit


def _lanes(ref, order: list[ir.IndexRange], spent: list, lanes=None, n: int = 1):
    """Every tuple of the ``order`` indices, as (index -> 1-D values, count) in pieces of
    at most ``LANES_AT_ONCE``; a range with data-dependent ends is expanded lane by lane
    (the rows of each segment), never padded to the longest."""
    lanes = {} if lanes is None else lanes
    if not order:
        spent[0] += n
        if spent[0] > LANES_AT_MOST:
            raise _TooMany
        yield lanes, n
        return
    r, rest = order[0], order[1:]
    if r.lo is None or r.hi is None:
        raise _Unknown(r.name)
    sc = _Scope(1, lanes, True)
    lo = np.broadcast_to(np.asarray(ref.eval(r.lo, sc), dtype=np.int64), (n,))
    hi = np.broadcast_to(np.asarray(ref.eval(r.hi, sc), dtype=np.int64), (n,))
    length = np.maximum(hi - lo, 0)
    total = int(length.sum())
    if total > LANES_AT_ONCE and n > 1:  # in pieces of whole lanes
        ends = np.cumsum(length)
        start = 0
        while start < n:
            stop = max(int(np.searchsorted(ends, ends[start] - length[start] + LANES_AT_ONCE,
                                           side="right")), start + 1)
            part = {k: v[start:stop] for k, v in lanes.items()}
            yield from _lanes(ref, order, spent, part, stop - start)
            start = stop
        return
    if total > LANES_AT_ONCE:  # one lane, a long range: in pieces of the range
        for a in range(int(lo[0]), int(hi[0]), LANES_AT_ONCE):
            values = np.arange(a, min(a + LANES_AT_ONCE, int(hi[0])), dtype=np.int64)
            part = {k: np.repeat(v, len(values)) for k, v in lanes.items()}
            part[r.name] = values
            yield from _lanes(ref, rest, spent, part, len(values))
        return
    owner = np.repeat(np.arange(n), length)
    step = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(length) - length, length)
    part = {k: v[owner] for k, v in lanes.items()}
    part[r.name] = lo[owner] + step
    yield from _lanes(ref, rest, spent, part, total)


def _union(prints: list[list], shape) -> list:
    """The union of reads' footprints, group by group, where that is exact: they group
    alike and differ in one group at most. Else the footprint of the read that touches
    most: a product of the groups' (or dims') unions counts positions no read touches
    (``x[i, 0] + x[0, i]``: N x N for 2N - 1), and a floor must stay low."""
    alike = len({tuple(d for d, _ in f) for f in prints}) == 1
    if not (alike and sum(not all(_same(f[k][1], prints[0][k][1]) for f in prints)
                          for k in range(len(prints[0]))) <= 1):
        return max(prints, key=lambda f: _count(f, shape))
    out = []
    for k, (dims, _) in enumerate(prints[0]):
        hits = [f[k][1] for f in prints]
        out.append((dims, None if any(h is None for h in hits) else
                    functools.reduce(np.logical_or, hits)))
    return out


def _same(a, b) -> bool:
    """Two groups' bitmaps (None: all of it) cover the same positions."""
    return a is b or (a is not None and b is not None and np.array_equal(a, b)) or \
        (a is None and bool(b.all())) or (b is None and bool(a.all()))


def _count(groups: list, shape) -> int:
    """The elements of a footprint: its groups' counts multiplied, dims in no group whole."""
    n, covered = 1, set()
    for dims, hit in groups:
        covered |= set(dims)
        n *= int(np.prod([shape[p] for p in dims], dtype=np.int64)) if hit is None else \
            int(hit.sum())
    for p, size in enumerate(shape):
        if p not in covered:
            n *= size
    return n


# ---- the rate and the verdict --------------------------------------------------

def cache_bytes() -> int:
    """The bytes a CPU's caches can hold: each data or unified cache of level 2 and up,
    each instance once (``/sys/devices/system/cpu``); else the L3 and L2 sizes from
    ``os.sysconf``; else ``CACHE_FALLBACK``. Counting inclusive caches twice only lowers
    the CPU floor: it must never be above what a correct kernel can reach."""
    return _cache_bytes()


CACHE_FALLBACK = 256 << 20  # as large as server CPUs' L3s come: a floor too low, not high
SYSFS_CPU = Path("/sys/devices/system/cpu")


@functools.lru_cache(maxsize=1)
def _cache_bytes() -> int:
    seen: dict[tuple, int] = {}
    for index in SYSFS_CPU.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text().strip())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if level >= 2 and kind in ("Data", "Unified"):
            seen[(level, shared)] = size
    if seen:
        return sum(seen.values())
    names = getattr(os, "sysconf_names", {})
    total = 0
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        if name in names:
            with contextlib.suppress(OSError, ValueError):
                total += max(int(os.sysconf(name)), 0)
    return total or CACHE_FALLBACK


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def cpu_copy_bytes() -> int:
    """Bytes one CPU copy moves to measure the bandwidth: source and destination each at
    least twice the caches (so the copy streams from memory, and glibc's memcpy takes its
    non-temporal path that does not read the destination first), within 64 MiB .. 1 GiB."""
    want = 4 * cache_bytes()
    return min(max(1 << max(want - 1, 1).bit_length(), 64 << 20), 1 << 30)


_BANDWIDTH: dict[tuple, float] = {}


def copy_bandwidth(device: str, nbytes: int = 0, fresh: bool = False,
                   hold=contextlib.nullcontext) -> float:
    """Bytes per second a plain copy moves (read + write): on CPU a copy beyond the caches
    (``cpu_copy_bytes``), measured once per process; on a GPU at every call, keeping the
    fastest seen in this process. ``nbytes`` is not used (callers pass their traffic).

    Interference only ever slows a copy, so the fastest is the best estimate. A figure
    measured once had stayed low for a whole process: in two H200 suites (2026-12-04) one
    confirming worker read 3.79-3.80 TB/s where every other read 4.19-4.24, and its op's
    floor was 10-12% too high. One more measurement costs about 2 ms of a timing stage.
    On CPU the faster of numpy's single-threaded memcpy and torch's threaded copy: a
    threaded copy stalls on a busy machine, a single thread undersells a big one.
    """
    key, moved = (("cuda",), CUDA_COPY_BYTES) if device == "cuda" else \
        (("cpu",), cpu_copy_bytes())
    if fresh or device == "cuda" or key not in _BANDWIDTH:
        from .threads import timed_work
        with hold(), timed_work():  # the device lock, when measuring
            _BANDWIDTH[key] = max(_BANDWIDTH.get(key, 0.0), _measure_copy(device, moved))
            if device != "cuda":  # the rate inside the caches, in the same lock
                _BANDWIDTH[_CACHE_KEY] = max(_BANDWIDTH.get(_CACHE_KEY, 0.0),
                                             _measure_cache_copy())
    return _BANDWIDTH[key]


_CACHE_KEY = ("cpu", "cache")
CACHE_RATE_MARGIN = 2.0
CACHE_COPY_LEAST = 1 << 20  # bytes moved by the smallest copy measured inside the caches


def cache_bandwidth() -> float:
    """Bytes per second of the fastest copy (read + write) whose buffers fit in the CPU's
    caches: measured with the beyond-the-caches copy (``copy_bandwidth``), else here, once
    a process. Interference only slows a copy, and ``in_cache_rate`` charges the cached
    bytes at ``CACHE_RATE_MARGIN`` times this, so the floor stays under an honest kernel's
    time even where it only reads (a read-only pass may outrun a copy) or a smaller level
    (L1, L2) holds its bytes."""
    if _CACHE_KEY not in _BANDWIDTH:
        from .threads import timed_work
        with timed_work():
            _BANDWIDTH[_CACHE_KEY] = _measure_cache_copy()
    return _BANDWIDTH[_CACHE_KEY]


def _measure_cache_copy() -> float:
    """The fastest of copies moving 1 MiB, 2 MiB, ... up to half the caches (source and
    destination inside them), threaded (torch) and single-threaded (numpy), best of a few."""
    import torch
    best, moved = 0.0, CACHE_COPY_LEAST
    while moved <= max(cache_bytes() // 2, CACHE_COPY_LEAST):
        src = torch.ones(moved // 2, dtype=torch.uint8)
        dst = torch.empty_like(src)
        a, b = src.numpy(), dst.numpy()
        reps = max(5, min(100, (1 << 27) // moved))
        best_ms = min(min(CpuTimer()(lambda: dst.copy_(src), warmup=3, reps=reps)),
                      min(CpuTimer()(lambda: np.copyto(b, a), warmup=3, reps=reps)))
        best = max(best, moved / (best_ms / 1e3)) if best_ms > 0 else best
        moved *= 2
    return best


def _measure_copy(device: str, moved: int) -> float:
    """Bytes per second of one copy of ``moved`` bytes (read + write), best of a few."""
    import torch
    src = torch.ones(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    if device == "cuda":
        best_ms = min(CudaTimer(flush_bytes=0)(lambda: dst.copy_(src), warmup=2, reps=5))
    else:
        reps = max(5, min(50, (1 << 27) // moved))
        a, b = src.numpy(), dst.numpy()
        best_ms = min(min(CpuTimer()(lambda: dst.copy_(src), warmup=2, reps=reps)),
                      min(CpuTimer()(lambda: np.copyto(b, a), warmup=2, reps=reps)))
    return moved / (best_ms / 1e3)


def charged_bytes(nbytes: int, device: str) -> int:
    """The bytes the floor charges at the copy bandwidth: on CUDA all of them (the timer
    flushes L2 before each run); on CPU those beyond what the caches hold, which the timed
    runs may find there (``cache_bytes``). The rest are charged at ``in_cache_rate``."""
    return nbytes if device == "cuda" else max(nbytes - cache_bytes(), 0)


def in_cache_rate(bandwidth: float) -> float:
    """Bytes per second the floor charges the bytes the CPU's caches hold: ``CACHE_RATE_MARGIN``
    times the fastest copy inside them, and never slower than ``bandwidth`` (beyond them)."""
    return max(bandwidth, CACHE_RATE_MARGIN * cache_bandwidth())


def floor_ms(nbytes: int, bandwidth: float, device: str) -> float:
    """The least time moving ``nbytes`` (``traffic_bytes``) takes: the bytes beyond the
    caches at ``bandwidth`` bytes/s, on CPU those inside them at ``in_cache_rate``."""
    beyond = charged_bytes(nbytes, device)
    inside = nbytes - beyond
    ms = beyond / bandwidth * 1e3
    return ms + inside / in_cache_rate(bandwidth) * 1e3 if inside > 0 else ms


def verdict(time_ms: float, nbytes: int, bandwidth: float, device: str) -> str | None:
    """None when ``time_ms`` is believable; else why not, with both figures: a time under
    ``SUSPECT_FRACTION`` of the floor means the kernel cannot have done the work."""
    floor = floor_ms(nbytes, bandwidth, device)
    if not time_ms < SUSPECT_FRACTION * floor:
        return None
    charged = charged_bytes(nbytes, device)
    rate = f"at {bandwidth / 1e9:.4g} GB/s"
    caches = f"the caches' {cache_bytes() / 1e6:.4g} MB"
    inside = f"at {in_cache_rate(bandwidth) / 1e9:.4g} GB/s inside them"
    where = f", {rate}" if charged == nbytes else f", all inside {caches}, {inside}" \
        if charged == 0 else \
        f", {charged / 1e6:.4g} MB of them beyond {caches} {rate}, the rest {inside}"
    return (f"suspect: {time_ms:.4g} ms is faster than the memory-traffic floor "
            f"{floor:.4g} ms ({nbytes / 1e6:.4g} MB read and written{where}); "
            f"the kernel cannot have done the work")


def forget() -> None:
    """Drop the counted bench traffic (the process moved on to another bench case)."""
    _BENCH_TRAFFIC.clear()
