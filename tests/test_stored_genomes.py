"""The best genomes stored in specs/genomes/ are where searches start, so each must still be
a correct kernel: a generator change that breaks one fails here, on the CPU."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kdsl import backends, spec
from kdsl.search.candidate import Candidate
from kdsl.search.eval.evaluator import evaluate
from kdsl.search.executors import PoolExecutor
from kdsl.search.jobs import EvalConfig, EvalJob
from kdsl.search.starts import genomes_dir, starting_points

STORED = [(p.stem, backend, device, entry["genome"])
          for p in sorted(genomes_dir().glob("*.json"))
          for backend, by_device in json.loads(p.read_text()).items()
          for device, entry in by_device.items()]


def test_there_are_stored_genomes():
    assert STORED


@pytest.fixture(scope="module")
def interpreter_pool():
    """Triton kernels run on the CPU only in the interpreter, set up in worker processes."""
    pool = PoolExecutor(workers=2)
    yield pool
    pool.shutdown()


@pytest.mark.parametrize("op_name,backend,device,genome", STORED,
                         ids=[f"{o}-{b}-{d}" for o, b, d, _ in STORED])
def test_stored_genome_is_correct_on_cpu(op_name, backend, device, genome, request):
    op = spec.load(spec.library_dir() / f"{op_name}.kspec").ops[0]
    b = backends.get(backend)
    if device != "cpu" and "cpu" not in b.devices:
        pytest.skip(f"{backend} does not run on the CPU")
    space = b.space(op, device)  # a register cap is a gene on cuda only, for one
    assert space.complete(genome) == {**space.default(), **genome}, "genes left the space"
    on_cpu = b.space(op, "cpu")
    cfg = EvalConfig(device="cpu", time=False, seeds=(5,), cases_per_dtype=2)
    job = EvalJob(op, Candidate.of(backend, {k: v for k, v in genome.items()
                                             if k in on_cpu.names}), cfg)
    if backend.startswith("triton"):
        # the interpreter's bf16 arithmetic is wrong: judge the other dtypes here; and it
        # runs tl.sort at about 3 s a 1000-long row, so cases stay small
        dtypes = tuple(d for d in op.dtype_choices if d != "bf16")
        job = EvalJob(op, job.candidate, replace(cfg, dtypes=dtypes, cases_per_dtype=1,
                                                 max_case_elements=1 << 14, timeout_s=600.0))
        result = request.getfixturevalue("interpreter_pool").submit(job).result()
    else:
        result = evaluate(job)
    assert result.ok, f"{result.stage}: {result.message[:500]}"
    assert result.artifacts.get("cases_checked", 0) > 0, "no case was small enough to run"
    # and a search of this op on this backend starts from it
    starts = starting_points(op, {backend: space}, device)
    assert starts[0].genes == space.complete(genome) and starts[0].origin == "stored"


def test_a_search_can_start_from_the_defaults_instead():
    op_name, backend, device, genome = STORED[0]
    op = spec.load(spec.library_dir() / f"{op_name}.kspec").ops[0]
    space = backends.get(backend).space(op, "cpu")
    starts = starting_points(op, {backend: space}, device, stored=False)
    assert [s.origin for s in starts] == ["default"] and starts[0].genes == space.default()


def test_each_backend_finds_its_own_stored_genome():
    # layernorm stores a triton/cuda genome but no c/cuda one (its c genome is for the cpu);
    # the backend sorted first (c) having none must not hide the one after it
    op = spec.load(spec.library_dir() / "layernorm.kspec").ops[0]
    spaces = {"c": backends.get("c").space(op, "cpu"),
              "triton": backends.get("triton").space(op, "cuda")}
    starts = starting_points(op, spaces, "cuda")
    assert [(s.backend, s.origin) for s in starts] == [
        ("c", "default"), ("triton", "stored"), ("triton", "default")]
