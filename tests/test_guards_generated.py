"""Every kernel kdsl's own generators write passes every guard: the allow-lists are wide enough.

Defaults for the library specs run always (fast); KernelBench level 1 and random genome
variants run as slow tests. Triton renders for 'cuda' (rendering needs no GPU); the others
for 'cpu'. C kernels are compiled for their object check (cached by source).
"""
from __future__ import annotations

import glob
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from kdsl import backends, spec
from kdsl.search.eval import guards

BACKENDS = ("triton", "numpy", "torch", "c")
LIBRARY = sorted(glob.glob("specs/*.kspec"))
KERNELBENCH = sorted(glob.glob("specs/kernelbench/level1/*.kspec"))


def rendered(backend: str, files, variants: int):
    """(label, source) for the default genome and ``variants`` seeded samples of every op."""
    try:
        b = backends.get(backend)
    except Exception as e:  # a backend still being written
        pytest.skip(f"backend {backend} unavailable: {e}")
    device = "cuda" if backend == "triton" else "cpu"
    out = []
    for path in files:
        for op in spec.load(path).ops:
            if b.supports(op, device):
                continue
            space = b.space(op, device)
            genomes = [space.default()] + [space.sample(random.Random(i)) for i in range(variants)]
            for i, genome in enumerate(genomes):
                out.append((f"{path}:{op.name}#{i}", b.render(op, genome, device)))
    return b, out


def violations(b, sources) -> list[str]:
    def one(item):
        label, source = item
        return [f"{label}: {v}" for v in guards.check(source, b.language, b.name)]
    with ThreadPoolExecutor(2) as pool:  # C: compiler runs, two at a time
        return [v for found in pool.map(one, sources) for v in found]


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_kernels_of_the_library_specs_pass_every_guard(backend):
    b, sources = rendered(backend, LIBRARY, variants=0)
    assert sources
    assert violations(b, sources) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_kernelbench_kernels_and_genome_variants_pass_every_guard(backend):
    b, library = rendered(backend, LIBRARY, variants=2)
    _, kernelbench = rendered(backend, KERNELBENCH, variants=1 if backend == "c" else 2)
    sources = [s for s in library if not s[0].endswith("#0")] + kernelbench
    assert violations(b, sources) == []
