"""The GPU suite's bookkeeping: figures from confirmations, merging split runs, stored winners."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import suite_table  # noqa: E402


def conf(ms, base, name, floor=1.0, ok=True):
    return {"ok": ok, "stage": "timing" if ok else "correctness", "time_ms": ms,
            "baseline_ms": base, "baseline_name": name, "floor_ms": floor}


def row(op, best_ms, default_ms, eager=4.0, compiled=2.0, genome=None, cls="memory"):
    return {"op": op, "class": cls, "shape": {"N": 8}, "dtype": "bf16",
            "search": {"evaluations": 24, "failures": 0, "wall_s": 10.0,
                       "evaluations_per_s": 2.4},
            "best_genome": genome or {"BLOCK": 64},
            "default": {"eager": conf(default_ms, eager, "eager"),
                        "compile": conf(default_ms, compiled, "torch.compile")},
            "best": {"eager": conf(best_ms, eager, "eager"),
                     "compile": conf(best_ms, compiled, "torch.compile")}}


def doc(rows, gpu="GPU-A", budget=24):
    return {"meta": {"date": "2026-12-02T10:00:00+00:00", "host": {"gpu": gpu}, "budget": budget,
                     "seed": 0, "policy": "mcts", "wall_s": 100.0, "versions": {}},
            "rows": rows}


def test_figures_are_ratios_of_the_confirmed_times():
    f = suite_table.figures(row("a", best_ms=1.0, default_ms=2.0, eager=4.0, compiled=2.5))
    assert (f["vs_eager"], f["vs_compile"], f["of_floor"]) == (4.0, 2.5, 1.0)


def test_each_speedup_pairs_a_baseline_with_the_kernel_timed_beside_it():
    r = row("a", best_ms=1.0, default_ms=2.0, eager=4.0, compiled=2.5)
    r["best"]["compile"]["time_ms"] = 1.25  # the second timing read slower
    f = suite_table.figures(r)
    assert f["vs_eager"] == 4.0 and f["vs_compile"] == 2.0 and f["best_ms"] == 1.125


def test_a_failed_confirmation_has_no_best_time():
    r = row("a", 1.0, 2.0)
    r["best"] = {m: conf(None, None, "eager", ok=False) for m in ("eager", "compile")}
    assert suite_table.figures(r)["best_ms"] is None
    assert "failed" in suite_table.markdown(doc([r]))


def test_a_best_one_confirmation_found_wrong_is_wrong_whatever_the_other_read():
    r = row("a", 1.0, 2.0)
    r["best"]["eager"] = {**conf(None, None, "eager", ok=False),
                          "message": "y: 47798 of 49920 elements outside rtol=0.0001"}
    f = suite_table.figures(r)
    assert f["best_ms"] is None and f["vs_compile"] is None
    lines = "\n".join(suite_table.summary_lines(doc([r, row("b", 1.0, 2.0)])))
    assert "correct best kernel: 1 of 2 ops" in lines
    assert "found wrong by a confirmation (no figure): a best: y: 47798 of 49920" in lines
    assert not suite_table.beats_default(r)
    # a confirmation that timed out says nothing of the outputs: the other one stands
    r["best"]["eager"] = {**conf(None, None, "eager", ok=False), "stage": "timing",
                          "message": "timed out after 300 s"}
    assert suite_table.figures(r)["best_ms"] == 1.0


def test_summary_counts_memory_bound_ops_against_the_floor_target():
    rows = [row("near", 1.1, 2.0), row("far", 1.5, 2.0), row("mm", 3.0, 3.0, cls="contraction")]
    text = "\n".join(suite_table.summary_lines(doc(rows)))
    assert "within 1.15x of the floor: 1 of 2 (missed: far)" in text


def test_merge_keeps_rows_in_order_and_refuses_mixed_gpus():
    merged = suite_table.merge([doc([row("a", 1, 2)]), doc([row("b", 1, 2)], budget=40)])
    assert [r["op"] for r in merged["rows"]] == ["a", "b"] and merged["meta"]["budget"] == "24/40"
    with pytest.raises(ValueError, match="different GPUs"):
        suite_table.merge([doc([row("a", 1, 2)]), doc([row("b", 1, 2)], gpu="GPU-B")])


def test_a_merged_document_merges_again():
    first = suite_table.merge([doc([row("a", 1, 2)]), doc([row("b", 1, 2)], budget=16)])
    again = suite_table.merge([doc([row("c", 1, 2)], budget=12), first])
    assert [r["op"] for r in again["rows"]] == ["c", "a", "b"]
    assert again["meta"]["budget"] == "12/16/24" and len(again["meta"]["parts"]) == 3
    # a last part with nothing left to run took 0 s: the whole still has a wall time
    empty = doc([])
    empty["meta"]["wall_s"] = 0.0
    assert suite_table.merge([first, empty])["meta"]["wall_s"] == 200.0


def test_a_later_part_remeasures_an_op_in_its_place():
    old = doc([row("a", 1, 2), row("b", 1, 2)])
    new = doc([row("b", 1, 4), row("c", 1, 2)], budget=12)
    merged = suite_table.merge([old, new])
    assert [r["op"] for r in merged["rows"]] == ["a", "b", "c"]
    assert merged["rows"][1] is new["rows"][0]  # the later figures
    assert merged["meta"]["remeasured"] == ["b"]
    assert any("measured again" in line and "b" in line
               for line in suite_table.summary_lines(merged))


def test_an_op_that_failed_and_ran_again_is_retried_not_remeasured():
    failed = {"op": "a", "error": "search: CUDA error: launch failure"}
    merged = suite_table.merge([doc([failed, row("b", 1, 2)]), doc([row("a", 1, 2)])])
    assert [r["op"] for r in merged["rows"]] == ["a", "b"] and "error" not in merged["rows"][0]
    assert merged["meta"]["retried"] == ["a"] and "remeasured" not in merged["meta"]
    assert "- failed in an earlier part, then run again: a" in suite_table.summary_lines(merged)


def test_store_genomes_keeps_winners_and_skips_where_the_default_was_faster(tmp_path):
    genomes = tmp_path / "genomes"
    genomes.mkdir()
    (genomes / "a.json").write_text(json.dumps({"c": {"cpu": {"genome": {"x": 1}}}}))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(doc([row("a", 1.0, 2.0, genome={"BLOCK": 128}),
                                     row("b", 2.0, 1.0)])))
    suite_table.store_genomes(suite, genomes)
    a = json.loads((genomes / "a.json").read_text())
    assert a["c"]["cpu"]["genome"] == {"x": 1}  # other backends' entries are kept
    assert a["triton"]["cuda"]["genome"] == {"BLOCK": 128}
    assert a["triton"]["cuda"]["speedup"] == 2.0 and a["triton"]["cuda"]["baseline"] == "torch.compile"
    assert not (genomes / "b.json").exists()


def test_store_genomes_wants_the_best_faster_than_the_default_beside_both_baselines(tmp_path):
    genomes = tmp_path / "genomes"
    genomes.mkdir()
    one_sided = row("a", 1.0, 1.02, genome={"BLOCK": 128})
    one_sided["best"]["compile"]["time_ms"] = 1.03  # slower than the default beside compile
    suite = tmp_path / "suite.json"
    unconfirmed = row("c", 1.0, 1.1, genome={"BLOCK": 16})
    unconfirmed["best"]["compile"] = conf(None, None, "torch.compile", ok=False)
    suite.write_text(json.dumps(doc([one_sided, row("b", 1.0, 1.02, genome={"BLOCK": 32}),
                                     unconfirmed])))
    suite_table.store_genomes(suite, genomes)
    assert not (genomes / "a.json").exists() and not (genomes / "c.json").exists()
    assert json.loads((genomes / "b.json").read_text())["triton"]["cuda"]["genome"] == {"BLOCK": 32}


def test_store_genomes_drops_a_stored_genome_that_the_default_now_beats(tmp_path):
    genomes = tmp_path / "genomes"
    genomes.mkdir()
    (genomes / "b.json").write_text(json.dumps({"triton": {"cuda": {"genome": {"old": 1}}}}))
    (genomes / "c.json").write_text(json.dumps({"c": {"cpu": {"genome": {"x": 1}}},
                                                "triton": {"cuda": {"genome": {"old": 1}}}}))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(doc([row("b", 2.0, 1.0), row("c", 2.0, 1.0)])))
    suite_table.store_genomes(suite, genomes)
    assert not (genomes / "b.json").exists()  # nothing else was stored for b
    assert json.loads((genomes / "c.json").read_text()) == {"c": {"cpu": {"genome": {"x": 1}}}}


def test_a_compile_baseline_that_fell_back_to_eager_has_no_compile_figure():
    r = row("a", best_ms=1.0, default_ms=2.0, eager=4.0, compiled=4.0)
    for which in ("best", "default"):
        r[which]["compile"]["baseline_name"] = "eager"
    f = suite_table.figures(r)
    assert f["compile_ms"] is None and f["vs_compile"] is None and f["vs_eager"] == 4.0
    text = "\n".join(suite_table.summary_lines(doc([r, row("b", 1.0, 2.0)])))
    assert "captured no graph in the confirming worker (no compile figure, left out of the " \
           "compile mean): a" in text
    assert "over torch.compile: 2x" in text
    # the default's compile confirmation still compiled: that figure stands, nothing is left out
    r["default"]["compile"]["baseline_name"] = "torch.compile"
    f = suite_table.figures(r)
    assert f["compile_ms"] == 4.0 and not f["compile_fell_back"]
    assert "captured no graph" not in "\n".join(suite_table.summary_lines(doc([r])))


def test_a_terminated_suite_keeps_its_table_and_runs(tmp_path):
    """SIGTERM (what `timeout` sends) during an op's search: the table names the op cut off
    and runs.tar.gz still holds its run directory."""
    import os
    import signal
    import subprocess
    import tarfile
    import time
    out = tmp_path / "suite"
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, str(root / "bench" / "gpu_suite.py"), "--out",
                             str(out), "--ops", "rmsnorm", "--device", "cpu", "--backend", "c",
                             "--budget", "500", "--workers", "1"], env=env, cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not any((out / "runs" / "rmsnorm").glob("*")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.2)
    time.sleep(1.0)  # a few evaluations into the search
    proc.send_signal(signal.SIGTERM)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, log[-3000:]
    doc = json.loads((out / "suite.json").read_text())
    (row,) = doc["rows"]
    assert row["op"] == "rmsnorm" and row["skipped"].startswith("terminated during its search")
    with tarfile.open(out / "runs.tar.gz") as tar:
        assert any(n.startswith("runs/rmsnorm/") for n in tar.getnames())


def test_a_best_genome_that_launches_the_default_kernels_is_not_stored(tmp_path):
    """One warp holds 32 keys a thread, so the sort's launcher clamps two rows a program to
    one: that genome is the default kernel, whatever the search's timing said."""
    pytest.importorskip("triton")
    from kdsl.backends.triton.backend import interpreting
    if interpreting():
        pytest.skip("this process runs the interpreter")
    genomes = tmp_path / "genomes"
    genomes.mkdir()
    suite = tmp_path / "suite.json"
    same = {"BLOCK_R": 2, "method": "hypercube", "num_warps": 1}
    other = {"BLOCK_R": 1, "method": "hypercube", "num_warps": 2}
    suite.write_text(json.dumps(doc([row("sort_rows", 1.0, 1.1, genome=same),
                                     row("topk_rows", 1.0, 1.1, genome=other)])))
    suite_table.store_genomes(suite, genomes)
    assert not (genomes / "sort_rows.json").exists()
    assert json.loads((genomes / "topk_rows.json").read_text())["triton"]["cuda"]["genome"] == other


def test_rest_of_runs_only_what_earlier_parts_did_not_finish(tmp_path):
    """A suite split across calls: the second call names the first's suite.json and runs
    the ops it skipped (softmax, cut by a deadline) or failed (gelu_tanh), not those it
    measured."""
    import os
    import subprocess
    root = Path(__file__).resolve().parent.parent
    part = tmp_path / "part1.json"
    part.write_text(json.dumps({"meta": {}, "rows": [
        {"op": "rmsnorm", "search": {}}, {"op": "softmax", "skipped": "deadline"},
        {"op": "gelu_tanh", "error": "CUDA error: launch failure"}]}))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    base = [sys.executable, str(root / "bench" / "gpu_suite.py"), "--out", str(tmp_path / "s"),
            "--ops", "rmsnorm,softmax,gelu_tanh", "--device", "cpu", "--backend", "c", "--budget", "2",
            "--workers", "1"]
    done = subprocess.run(base + ["--rest-of", str(part)], env=env, cwd=root, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "s" / "suite.json").read_text())["rows"]
    assert [r["op"] for r in rows] == ["softmax", "gelu_tanh"]  # a failed op runs again
    # confirmed in full, one op at a time (a CPU has no device lock to share)
    assert all(r["default"]["eager"]["ok"] and not r["confirmed_beside_search"] for r in rows)
    bad = subprocess.run(base + ["--rest-of", str(tmp_path / "missing.json")], env=env,
                         cwd=root, text=True, capture_output=True, timeout=120)
    assert bad.returncode == 2 and "--rest-of" in bad.stderr and "Traceback" not in bad.stderr
    # a part searched otherwise does not make one table with this run
    part.write_text(json.dumps({"meta": {"budget": 16, "seed": 0}, "rows": []}))
    other = subprocess.run(base + ["--rest-of", str(part)], env=env, cwd=root, text=True,
                           capture_output=True, timeout=120)
    assert other.returncode == 2 and "ran with budget 16, this run with 2" in other.stderr
    part.write_text(json.dumps({"meta": {"host": {"gpu": "NVIDIA H200"}}, "rows": []}))
    other = subprocess.run(base + ["--rest-of", str(part)], env=env, cwd=root, text=True,
                           capture_output=True, timeout=120)
    assert other.returncode == 2 and "ran on NVIDIA H200, this run on cpu" in other.stderr


def test_a_kernel_timed_apart_from_itself_is_flagged():
    steady, noisy = row("a", 1.0, 2.0), row("b", 1.0, 2.0)
    noisy["default"]["eager"]["time_ms"] = 2.2  # its compile-run timing says 2.0
    lines = suite_table.summary_lines(doc([steady, noisy]))
    assert suite_table.repeat_spread(steady) == 0.0
    assert abs(suite_table.repeat_spread(noisy) - 0.1) < 1e-9
    assert any(line.startswith("- one kernel's two confirmation timings disagree by more "
                               "than 2%") and line.endswith(": b 10.0%") for line in lines)


def test_the_summary_says_where_the_searches_seconds_went():
    a, b = row("a", 1.0, 2.0), row("b", 1.0, 2.0)
    a["search"]["seconds"] = {"stages": {"build": 10.0, "timing": 4.0}, "lock_wait": 2.5}
    b["search"]["seconds"] = {"stages": {"build": 5.0, "timing": 1.0}, "lock_wait": 1.0}
    lines = suite_table.summary_lines(doc([a, b]))
    assert "- the searches' evaluations, seconds summed over them (they overlap): build 15, " \
           "timing 5; waiting for the device lock 4" in lines
