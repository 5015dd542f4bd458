"""The search engine end to end on a fake backend and executor: runs, resume, reproducibility."""
from __future__ import annotations

import json
import shutil

import pytest

from kdsl.cli import main
from kdsl.errors import UsageError
from kdsl.search import lineage, runs
from kdsl.search.display import QuietDisplay
from kdsl.search.jobs import EvalConfig
from kdsl.search.runstore import LINEAGE, RunStore
from kdsl.search.settings import SearchSettings

from fakes import FakeExecutor, register

SPEC = "specs/swiglu.kspec"


@pytest.fixture(autouse=True)
def fake_backend():
    register()


def settings(**kw):
    base = dict(spec=SPEC, op=None, backends=("fake",), policy="mcts", seed=3, budget=25,
                workers=1, executor="inline", use_priors=False, eval=EvalConfig(time=True))
    base.update(kw)
    return SearchSettings(**base)


def strip(nodes):
    return [{k: v for k, v in r.items() if k != "time"} for r in nodes]


def test_run_writes_summary_lineage_and_kernels(tmp_path):
    store, summary = runs.start(settings(), tmp_path / "run", None, QuietDisplay(),
                                FakeExecutor())
    assert summary["evaluations"] == 25
    for key in ("spec", "op", "backend", "device", "policy", "seed", "budget", "evaluations",
                "failures", "baseline", "best", "elapsed_s", "versions"):
        assert key in summary
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["best"]["speedup"] == summary["best"]["speedup"] > 1.0
    assert (tmp_path / "run" / on_disk["best"]["source_path"]).is_file()
    assert on_disk["best"]["source_path"] == "kernels/best.py"
    reopened = RunStore.open(tmp_path / "run")
    assert len(reopened.nodes) == 25
    g = lineage.graph(reopened.nodes)
    assert g.number_of_nodes() == 26  # + the root
    assert all(g.has_edge(p, r["id"]) for r in reopened.nodes for p in r["parents"])
    # every evaluated kernel's source is on disk
    assert all((tmp_path / "run" / r["source_path"]).is_file()
               for r in reopened.nodes if r["source_path"])


def test_same_seed_same_cache_reproduces_exactly(tmp_path):
    cache = str(tmp_path / "cache.sqlite")
    a, _ = runs.start(settings(), tmp_path / "a", cache, QuietDisplay(), FakeExecutor())
    ex = FakeExecutor()
    b, _ = runs.start(settings(), tmp_path / "b", cache, QuietDisplay(), ex)
    assert strip(a.nodes) == strip(b.nodes)
    assert ex.submitted == 0  # every measurement came from the shared cache


@pytest.mark.parametrize("backend", ["fake", "fake_clamped"])
def test_parallel_workers_are_deterministic(tmp_path, backend):
    s = settings(workers=4, backends=(backend,))
    a, _ = runs.start(s, tmp_path / "a", None, QuietDisplay(), FakeExecutor(4))
    b, _ = runs.start(s, tmp_path / "b", None, QuietDisplay(), FakeExecutor(4))
    assert strip(a.nodes) == strip(b.nodes)


def test_different_seeds_differ(tmp_path):
    a, _ = runs.start(settings(seed=1), tmp_path / "a", None, QuietDisplay(), FakeExecutor())
    b, _ = runs.start(settings(seed=2), tmp_path / "b", None, QuietDisplay(), FakeExecutor())
    assert [r["key"] for r in a.nodes] != [r["key"] for r in b.nodes]


@pytest.mark.parametrize("backend", ["fake", "fake_clamped"])
@pytest.mark.parametrize("keep", [0, 7, 12])
def test_resume_after_kill_loses_no_completed_node(tmp_path, keep, backend):
    full, _ = runs.start(settings(budget=20, backends=(backend,)), tmp_path / "full", None,
                         QuietDisplay(), FakeExecutor())
    # simulate kill -9 after `keep` nodes: the header, `keep` records and a torn one
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "full", killed)
    import msgpack
    records = [full.header] + full.nodes[:keep]
    blob = b"".join(msgpack.packb(r) for r in records)
    torn = msgpack.packb(full.nodes[keep])[:-5]
    (killed / LINEAGE).write_bytes(blob + torn)
    assert len(RunStore.open(killed).nodes) == keep
    ex = FakeExecutor()
    resumed, summary = runs.resume(killed, None, QuietDisplay(), ex)
    assert strip(resumed.nodes) == strip(full.nodes)
    assert ex.submitted <= 20 - keep  # completed nodes are replayed, not re-evaluated
    assert summary["evaluations"] == 20


def test_resume_with_a_larger_budget_continues(tmp_path):
    runs.start(settings(budget=10), tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    store, summary = runs.resume(tmp_path / "r", 18, QuietDisplay(), FakeExecutor())
    assert summary["evaluations"] == 18 and len(store.nodes) == 18
    ids = [r["id"] for r in store.nodes]
    assert len(set(ids)) == 18


def test_crossover_children_carry_both_parents(tmp_path):
    s = settings(policy="evolution", budget=30, policy_params={"population": 4})
    store, _ = runs.start(s, tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    cross = [r for r in store.nodes if r["kind"] == "crossover"]
    assert cross
    g = lineage.graph(store.nodes)
    for r in cross:
        assert len(r["parents"]) == 2
        assert all(g.has_edge(p, r["id"]) for p in r["parents"])


def test_failures_are_recorded_children(tmp_path):
    s = settings(policy="random", budget=40, seed=5)
    store, summary = runs.start(s, tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    assert summary["failures"] == sum(1 for r in store.nodes if not r["result"]["ok"])
    assert summary["failures"] == sum(summary["failures_by_stage"].values())


def test_search_improves_on_the_start(tmp_path):
    store, summary = runs.start(settings(budget=40), tmp_path / "r", None, QuietDisplay(),
                                FakeExecutor())
    start = store.nodes[0]["result"]["speedup"]
    assert summary["best"]["speedup"] > start


def test_bad_input_is_one_line_and_keeps_the_run(tmp_path, capsys):
    runs.start(settings(budget=5), tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    before = (tmp_path / "r" / LINEAGE).read_bytes()
    for argv in (["search", SPEC, "--budget", "0"],
                 ["search", SPEC, "--policy", "nope"],
                 ["search", SPEC, "--backend", "nope"],
                 ["search", "specs/nope.kspec"],
                 ["search", SPEC, "--op", "nope"],
                 ["search", SPEC, "--backend", "fake", "--out", str(tmp_path / "r")],
                 ["resume", str(tmp_path / "nothing")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) <= 3 and "Traceback" not in "\n".join(err), err
    assert (tmp_path / "r" / LINEAGE).read_bytes() == before


def test_corrupt_lineage_is_a_clear_error(tmp_path, capsys):
    runs.start(settings(budget=5), tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    path = tmp_path / "r" / LINEAGE
    data = bytearray(path.read_bytes())
    data[len(data) // 2: len(data) // 2 + 40] = b"\xc1" * 40  # 0xc1 is never valid msgpack
    path.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="corrupt"):
        runs.resume(tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    assert main(["resume", str(tmp_path / "r")]) == 2
    assert "corrupt" in capsys.readouterr().err
    assert path.read_bytes() == bytes(data)


def test_show_run_prints_summary_and_plots(tmp_path, capsys):
    runs.start(settings(budget=12), tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    png = tmp_path / "run.png"
    assert main(["show", str(tmp_path / "r"), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "lineage of the best kernel" in out and "failures by stage" in out
    assert png.stat().st_size > 1000


def test_a_child_that_runs_what_an_earlier_one_ran_is_not_evaluated(tmp_path):
    """Genomes that differ only where the launcher clamps them run the same kernel at the
    bench point: the search evaluates one of them and spends its budget elsewhere."""
    store, _ = runs.start(settings(backends=("fake_clamped",), budget=30), tmp_path / "r",
                          None, QuietDisplay(), FakeExecutor())
    evaluated = [r["candidate"]["genome"] for r in store.nodes if r["candidate"]]
    ran = [(min(g["a"], 4), g["b"], g["mode"]) for g in evaluated]
    assert len(evaluated) > 10 and len(set(ran)) == len(ran)
    # the plain fake space, with no identity, evaluates such twins
    store, _ = runs.start(settings(budget=30), tmp_path / "p", None, QuietDisplay(),
                          FakeExecutor())
    ran = [(min(r["candidate"]["genome"]["a"], 4), r["candidate"]["genome"]["b"],
            r["candidate"]["genome"]["mode"]) for r in store.nodes if r["candidate"]]
    assert len(set(ran)) < len(ran)


def test_a_run_recorded_without_identities_resumes_with_them(tmp_path):
    """A replay follows the records: a run made where the backend could not tell what its
    candidates run (or by an older kdsl) resumes where it can, and goes on deduplicating."""
    from kdsl import backends
    clamped = backends.REGISTRY["fake_clamped"]
    clamped.telling = False
    try:
        full, _ = runs.start(settings(budget=20, backends=("fake_clamped",)), tmp_path / "r",
                             None, QuietDisplay(), FakeExecutor())
    finally:
        clamped.telling = True
    import msgpack
    (tmp_path / "r" / LINEAGE).write_bytes(b"".join(msgpack.packb(r) for r in
                                                    [full.header] + full.nodes[:15]))
    resumed, summary = runs.resume(tmp_path / "r", 30, QuietDisplay(), FakeExecutor())
    assert strip(resumed.nodes[:15]) == strip(full.nodes[:15]) and summary["evaluations"] == 30


class CrowdedExecutor(FakeExecutor):
    """Evaluates on threads, slowly; the first job runs out of memory (as if beside its
    neighbours). Notes, at each submission, how many earlier evaluations were running."""

    def __init__(self, workers):
        super().__init__(workers)
        from concurrent.futures import ThreadPoolExecutor
        self.pool = ThreadPoolExecutor(workers)
        self.futures, self.running_at_submit = [], []

    def submit(self, job):
        import time
        from kdsl.search.result import Result
        self.running_at_submit.append(sum(not f.done() for f in self.futures))
        first = not self.futures
        plain = super().submit(job).result()

        def evaluate():
            time.sleep(0.02)
            if first:
                return Result.failure("worker", "out of memory in timing: CUDA out of memory",
                                      out_of_memory=True)
            return plain
        fut = self.pool.submit(evaluate)
        self.futures.append(fut)
        return fut

    def shutdown(self):
        self.pool.shutdown()


def test_out_of_memory_beside_others_is_evaluated_again_alone(tmp_path):
    ex = CrowdedExecutor(3)
    store, _ = runs.start(settings(workers=3, budget=8), tmp_path / "run", None,
                          QuietDisplay(), ex)
    first = store.nodes[0]
    # recorded as its evaluation alone went (the fake's start genome is a mismatch)
    assert first["result"]["stage"] == "correctness"
    assert "out of memory" in first["result"]["artifacts"]["alone_after"]
    assert ex.submitted == 9  # eight nodes, one of them twice
    # the second try was submitted when nothing else was running
    assert ex.running_at_submit[3] == 0
    assert all(not r["result"]["artifacts"].get("alone_after") for r in store.nodes[1:])


def test_out_of_memory_with_one_worker_is_a_failure(tmp_path):
    ex = CrowdedExecutor(1)
    store, _ = runs.start(settings(workers=1, budget=4), tmp_path / "run", None,
                          QuietDisplay(), ex)
    assert store.nodes[0]["result"]["stage"] == "worker" and ex.submitted == 4
