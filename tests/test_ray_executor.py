"""The Ray executor on one local cluster (2 CPUs, 2 declared GPUs) shared by the module.

Evaluations are the fakes of ``ray_fakes`` (imported by the workers through
PYTHONPATH), except one real evaluation of a C candidate: what is tested is the
executor's contract: same results as a local evaluation, crashes and hangs cost
only their task, one GPU per cuda task, and runs that resume to identical nodes.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from kdsl import spec  # noqa: E402
from kdsl.search import runs  # noqa: E402
from kdsl.search.candidate import Candidate  # noqa: E402
from kdsl.search.display import QuietDisplay  # noqa: E402
from kdsl.search.jobs import EvalConfig, EvalJob  # noqa: E402
from kdsl.search.executors import InlineExecutor  # noqa: E402
from kdsl.search.ray_executor import RayExecutor  # noqa: E402
from kdsl.search.eval.verdict import verdict  # noqa: E402
from kdsl.search.result import Result  # noqa: E402
from kdsl.search.runstore import LINEAGE, RunStore  # noqa: E402
from kdsl.search.settings import SearchSettings  # noqa: E402

import ray_fakes  # noqa: E402
from fakes import FakeExecutor, register  # noqa: E402

SPEC = "specs/swiglu.kspec"
TESTS = str(Path(__file__).resolve().parent)
ENV = {"env_vars": {"PYTHONPATH": TESTS}}


@pytest.fixture(scope="module")
def cluster():
    """An executor that starts (and at the end stops) the module's local cluster."""
    assert not ray.is_initialized()
    tmp = tempfile.mkdtemp(prefix="kr", dir="/tmp")  # Ray's socket paths must stay short
    owner = RayExecutor(workers=2, num_cpus=2, num_gpus=2, temp_dir=tmp, runtime_env=ENV,
                        evaluate_fn=ray_fakes.evaluate)
    try:
        assert owner.owns_ray and ray.is_initialized()
        yield owner
    finally:
        owner.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    assert not ray.is_initialized()


@pytest.fixture(autouse=True)
def fake_backend():
    register()


def attached(workers=2, **kw) -> RayExecutor:
    """An executor on the module's cluster: it neither starts nor stops Ray."""
    kw = {"runtime_env": ENV, "evaluate_fn": ray_fakes.evaluate, **kw}
    ex = RayExecutor(workers=workers, **kw)
    assert not ex.owns_ray
    return ex


@pytest.fixture(scope="module")
def op():
    return spec.find_op(spec.load(SPEC), None)


def job(op, backend="fake", device="cpu", timeout_s=300.0, **genes) -> EvalJob:
    genome = {"a": 6, "b": 3, "mode": "y", **genes}
    return EvalJob(op, Candidate.of(backend, genome), EvalConfig(device=device,
                                                                 timeout_s=timeout_s))


def settings(**kw) -> SearchSettings:
    base = dict(spec=SPEC, op=None, backends=("fake",), policy="mcts", seed=3, budget=16,
                workers=2, executor="ray", eval=EvalConfig(time=True))
    base.update(kw)
    return SearchSettings(**base)


def strip(nodes):
    return [{k: v for k, v in r.items() if k != "time"} for r in nodes]


def results(ex, jobs, timeout=60):
    futures = [ex.submit(j) for j in jobs]
    return [f.result(timeout=timeout) for f in futures]


def test_evaluation_through_ray_equals_inline_evaluation(cluster, op):
    jobs = [job(op, a=a, b=b, mode=m) for a, b, m in
            [(6, 3, "y"), (1, 1, "x"), (2, 7, "x"), (8, 8, "y"), (4, 2, "y")]]
    assert results(cluster, jobs) == [ray_fakes.evaluate(j) for j in jobs]


def test_the_real_evaluator_through_ray_equals_inline_evaluation(cluster, op):
    """The default evaluation (``kdsl.search.eval.evaluator``) in a Ray worker."""
    from kdsl import backends
    c = backends.get("c")
    config = EvalConfig(time=False, seeds=(1,), cases_per_dtype=1)
    jobs = [EvalJob(op, Candidate.of("c", c.space(op, "cpu").default()), config),
            EvalJob(op, Candidate.of("nope"), config)]
    ex = attached(evaluate_fn=None)
    built, unknown = results(ex, jobs, timeout=300)
    ex.shutdown()
    # the whole pipeline ran in the worker (a C build is seconds: it is not repeated here)
    assert built.ok and built.stage == "correctness", built.message
    assert set(built.artifacts["stage_s"]) == {"render", "build", "guards", "correctness"}
    inline = InlineExecutor().submit(jobs[1]).result()
    assert not unknown.ok and unknown.stage == "render" and "nope" in unknown.message
    assert (unknown.ok, unknown.stage, unknown.message) == (inline.ok, inline.stage,
                                                            inline.message)


def test_a_search_through_ray_equals_the_local_executor(cluster, tmp_path):
    # runs that use no earlier knowledge: what one run learned (operator priors, the cache's
    # cost-model rows) would steer the next
    local, _ = runs.start(settings(executor="inline", use_priors=False), tmp_path / "local",
                          None, QuietDisplay(), FakeExecutor(2))
    cache = str(tmp_path / "cache.sqlite")
    through, summary = runs.start(settings(use_priors=False), tmp_path / "ray", cache,
                                  QuietDisplay(), attached())
    assert strip(through.nodes) == strip(local.nodes)
    assert summary["evaluations"] == 16
    # the cache lives with the driver: a local run on Ray's cache re-measures nothing
    ex = FakeExecutor(2)
    again, _ = runs.start(settings(executor="inline", use_priors=False), tmp_path / "again",
                          cache, QuietDisplay(), ex)
    assert strip(again.nodes) == strip(through.nodes) and ex.submitted == 0


def test_resume_after_a_driver_kill_through_ray(cluster, tmp_path):
    full, _ = runs.start(settings(), tmp_path / "full", None, QuietDisplay(), attached())
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "full", killed)
    import msgpack
    keep = 6
    blob = b"".join(msgpack.packb(r) for r in [full.header] + full.nodes[:keep])
    torn = msgpack.packb(full.nodes[keep])[:-5]
    (killed / LINEAGE).write_bytes(blob + torn)
    assert len(RunStore.open(killed).nodes) == keep
    (killed / "cache.sqlite").unlink()  # so the rest is evaluated again, through Ray
    ex = attached()
    resumed, summary = runs.resume(killed, None, QuietDisplay(), ex)
    assert strip(resumed.nodes) == strip(full.nodes)
    assert 0 < ex.submitted <= 16 - keep and summary["evaluations"] == 16
    assert ray.is_initialized()  # the run shut its executor down, not the caller's cluster


def test_a_dead_worker_costs_only_its_task_and_an_outside_kill_is_re_run(cluster, op,
                                                                          tmp_path):
    marker = tmp_path / "attempts"
    jobs = [job(op), job(op, mode="kill"), job(op, mode="kill-once", path=str(marker)),
            job(op, a=5), job(op, b=4)]
    ok1, killed, once, ok2, ok3 = results(cluster, jobs)
    # the candidate's crash repeats on the re-run: it is blamed, with a clear message
    assert not killed.ok and killed.stage == "worker"
    assert "died" in killed.message and "2 times" in killed.message
    # a worker killed once from outside: the re-run succeeds
    assert once.ok and once.artifacts["attempts"] == 2
    assert [ok1, ok2, ok3] == [ray_fakes.evaluate(j) for j in (jobs[0], jobs[3], jobs[4])]


def test_a_hanging_evaluation_times_out_and_is_cancelled(cluster, op, tmp_path):
    pid_file = tmp_path / "pid"
    t0 = time.monotonic()
    hung, after = results(cluster, [job(op, mode="hang", path=str(pid_file), timeout_s=1.0),
                                    job(op, a=7)])
    assert time.monotonic() - t0 < 30
    assert not hung.ok and hung.stage == "worker" and "timed out after 1 s" in hung.message
    assert after == ray_fakes.evaluate(job(op, a=7))
    pid = int(pid_file.read_text())
    assert _dies(pid), "the hanging worker process was not killed"
    (later,) = results(cluster, [job(op, b=5)])
    assert later.ok


def test_an_evaluation_that_raises_is_a_worker_failure(cluster, op):
    (r,) = results(cluster, [job(op, mode="raise")])
    assert not r.ok and r.stage == "worker" and "RuntimeError" in r.message
    assert "a bug in the evaluation" in r.artifacts["traceback"]


def test_out_of_memory_is_a_worker_failure_and_its_worker_is_replaced(cluster, op):
    oom = Result.failure("timing", "CUDA out of memory", out_of_memory=True)
    result, why = verdict(job(op), oom)
    assert result.stage == "worker" and result.message.startswith("out of memory in timing")
    assert why and verdict(job(op), ray_fakes.evaluate(job(op))) == (
        ray_fakes.evaluate(job(op)), None)
    ex = attached(workers=1)
    (r,) = results(ex, [job(op, mode="oom")])
    assert not r.ok and r.stage == "worker" and "out of memory" in r.message
    # that worker never evaluates again: it exits at its next task, which is re-run
    later = [results(ex, [job(op, mode="probe", a=a)])[0] for a in (2, 3, 4, 5, 6, 7)]
    ex.shutdown()
    assert all(x.ok for x in later)
    assert r.artifacts["pid"] not in {x.artifacts["pid"] for x in later}


def test_cuda_jobs_take_one_gpu_each_and_run_side_by_side(cluster, op, tmp_path):
    ex = attached(workers=4)
    assert ex.resources["GPU"] == 2 and ex.slots("cuda") == 2 and ex.slots("cpu") == 2
    cuda, cpu = job(op, device="cuda"), job(op)
    assert ex.task_options(cuda)["num_gpus"] == 1 and ex.task_options(cpu)["num_gpus"] == 0
    assert ex.task_options(cuda)["max_retries"] == 0
    # the first two must be inside at once (a barrier); the third has no GPU left then
    barrier = dict(mode="probe", barrier=str(tmp_path / "barrier"), parties=2)
    first, second, third = (r.artifacts for r in results(ex, [
        job(op, device="cuda", a=1, **barrier), job(op, device="cuda", a=2, **barrier),
        job(op, device="cuda", a=3, mode="probe")], timeout=120))
    ex.shutdown()
    assert first["met"] and second["met"], "two cuda evaluations did not run side by side"
    assert {first["cuda_visible_devices"], second["cuda_visible_devices"]} == {"0", "1"}
    assert third["start"] >= min(first["end"], second["end"]) - 0.05
    for a in (first, second, third):
        assert [str(i) for i in a["ray_gpu_ids"]] == [a["cuda_visible_devices"]]
        assert a["triton_interpret"] == "0"
    # cpu results carry no placement, so they equal the local executor's
    (plain,) = results(cluster, [job(op, mode="probe")])
    assert "ray_gpu_ids" not in plain.artifacts


def test_triton_on_the_cpu_runs_interpreted(cluster, op):
    triton = job(op, backend="triton", mode="probe")
    assert cluster.task_options(triton)["runtime_env"]["env_vars"] == {
        "PYTHONPATH": TESTS, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
        "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # (a task's one CPU)
    (interpreted,) = results(cluster, [triton])
    assert interpreted.artifacts["triton_interpret"] == "1"
    assert interpreted.artifacts["cuda_visible_devices"] == ""
    on_gpu = cluster.task_options(job(op, backend="triton", device="cuda"))
    assert on_gpu["runtime_env"]["env_vars"]["TRITON_INTERPRET"] == "0"


def test_shutdown_cancels_in_flight_work_and_keeps_the_callers_cluster(cluster, op, tmp_path):
    ex = attached()
    pid_file = tmp_path / "pid"
    fut = ex.submit(job(op, mode="hang", path=str(pid_file)))
    deadline = time.monotonic() + 30
    # (the file exists a moment before its pid is written in it: a CI run read it empty)
    while not (pid_file.exists() and pid_file.read_text().strip()) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    ex.shutdown()
    r = fut.result(timeout=5)
    assert not r.ok and r.stage == "worker" and "shut down" in r.message
    assert _dies(int(pid_file.read_text()))
    assert ray.is_initialized()
    late = ex.submit(job(op)).result(timeout=1)
    assert not late.ok and "shut down" in late.message


def _dies(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):  # killed, not yet reaped
            return True
        time.sleep(0.1)
    return False
