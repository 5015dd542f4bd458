"""Profiles: ncu and perf output parsed from recorded fixtures, the diagnoses read from them,
the one-line messages where a machine cannot profile, and what a search does with them
(records, ``kdsl show``, the operators' gene order, the cost model's features, the early
stop). No GPU, no profiler run: the profiler is a fake where a search needs one."""
from __future__ import annotations

import json
import math
import os
import random
import stat
from pathlib import Path

import pytest

from kdsl.backends.base import Gene, Space
from kdsl.cli import main
from kdsl.search import costmodel, runs
from kdsl.search.candidate import Candidate
from kdsl.search.display import QuietDisplay
from kdsl.search.jobs import EvalConfig
from kdsl.search.operators import Context, RULE_OPERATORS
from kdsl.search.profile import Diagnosis, Profile, advice, diagnose, ncu, ncu_csv, perf
from kdsl.search.profile import metrics as m
from kdsl.search.profile import profiler
from kdsl.search.profile.record import ProfilerUnavailable
from kdsl.search.runstore import RunStore
from kdsl.search.settings import SearchSettings

from fakes import FakeExecutor, register

# The ncu-*.csv fixtures are written by hand, not recorded on a GPU: their shape is the one
# ncu 2024.1.1 itself printed (``ncu --import REPORT --csv --page raw|details``) for a
# report recorded on an sm_90 GPU: identity columns, metric columns sorted by name, a units
# row, plain numbers, ==PROF== lines before the table; the details page with the five rule
# columns of 2024.1 and metric rows that stop after their value. The numbers are invented.
FIX = Path(__file__).parent / "fixtures" / "profile"
SPEC = "specs/swiglu.kspec"
COPY = 4.3e12  # bytes/s: the H200's measured copy bandwidth


def gpu_profile(name: str) -> Profile:
    ks = ncu_csv.parse((FIX / name).read_text())
    return Profile("ncu", True, device="cuda", kernels=tuple(ks), copy_bandwidth=COPY)


# ---- parsing ----

def test_raw_page_parses_in_base_units_and_skips_ncu_lines():
    ks = ncu_csv.parse((FIX / "ncu-memory-softmax.csv").read_text())
    assert [k.name for k in ks] == ["_kd_softmax"]
    k = ks[0]
    assert k.get(m.DURATION) == 135904.0 and k.units[m.DURATION] == "nsecond"
    assert k.get(m.DRAM_READ) == 268697600.0
    assert k.get(m.DRAM_THROUGHPUT) == pytest.approx(88.71)
    assert k.get(m.REGISTERS) == 40.0 and k.units[m.REGISTERS] == "register/thread"
    assert k.get(m.SHARED_PER_BLOCK) == 1024.0 and k.units[m.SHARED_PER_BLOCK] == "byte/block"
    assert k.get(m.stall_metric("long_scoreboard")) == pytest.approx(61.2)
    assert k.get(m.stall_metric("gmma")) == 0.0
    assert "Block Size" not in k.metrics  # identity columns are not metrics
    assert "device__attribute_display_name" not in k.metrics  # "NVIDIA H200": not a number
    assert set(m.NCU_METRICS) <= set(k.metrics)  # every metric asked for has its column


def test_raw_page_values_ncu_prints_for_what_it_did_not_measure():
    """ncu 2024.1.1 prints "nan"/"-nan" for a metric it did not measure for a launch, "inf"
    for a ratio over zero and nothing for a launch__* metric without launch data; older
    versions wrote thousands separators. None of it may reach the diagnosis as a number."""
    text = ('"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum",'
            '"launch__grid_size","lts__t_sector_hit_rate.pct"\n'
            '"","","","nsecond","byte","","%"\n'
            '"0","7","_kd_a","16448","1,048,576","1056","inf"\n'
            '"1","7","_kd_b","nan","-nan","","n/a"\n'
            '"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum",'
            '"launch__grid_size","lts__t_sector_hit_rate.pct"\n'
            '"","","","nsecond","byte","","%"\n'
            '"2","7","_kd_c","3232","8448","8","98.68"\n')
    ks = ncu_csv.parse(text)
    assert [k.name for k in ks] == ["_kd_a", "_kd_c"]  # _kd_b measured nothing
    assert ks[0].metrics == {m.DURATION: 16448.0, m.DRAM_READ: 1048576.0, m.GRID_SIZE: 1056.0}
    assert ks[1].get(m.L2_HIT) == pytest.approx(98.68)
    for text in ("nan", "-nan", "inf", "-inf", "n/a", "", "(256, 1, 1)"):
        assert ncu_csv.number(text) is None


def test_details_page_with_auto_units_reads_the_same_quantities():
    # 2024.1's details page: a 20-column header, metric rows of 16 fields, a rule row
    [k] = ncu_csv.parse((FIX / "ncu-details-auto-units.csv").read_text())
    assert k.name == "_kd_cross_entropy"
    assert k.get(m.DRAM_READ) == pytest.approx(536.87e6)   # Mbyte
    assert k.get(m.DRAM_WRITE) == pytest.approx(32.77e3)   # Kbyte
    assert k.get(m.DURATION) == pytest.approx(166560.0)    # usecond -> ns
    assert k.get(m.GRID_SIZE) == 8192.0
    assert len(k.metrics) == 8 and "" not in k.metrics    # the rule row is no metric


def test_several_kernels_and_units():
    ks = ncu_csv.parse((FIX / "ncu-compute-matmul.csv").read_text())
    assert [k.name for k in ks] == ["_kd_matmul", "_kd_matmul_epilogue"]
    assert ncu_csv.to_base(1.2, "Gbyte/second") == (1.2e9, "byte/second")
    assert ncu_csv.to_base(2.0, "msecond") == (2e6, "nsecond")
    assert ncu_csv.to_base(7.0, "register/thread") == (7.0, "register/thread")
    # units ncu 2024.1.1 prints with --print-units auto
    assert ncu_csv.to_base(1.5, "cycle/nsecond") == (pytest.approx(1.5e9), "cycle/second")
    assert ncu_csv.to_base(64.0, "Kbyte/block") == (64e3, "byte/block")
    # the abbreviations newer releases are reported to print
    assert ncu_csv.to_base(211.94, "us") == (pytest.approx(211940.0), "nsecond")
    assert ncu_csv.to_base(2848.0, "ns") == (2848.0, "nsecond")
    assert ncu_csv.to_base(1.2, "Gbyte/s") == (1.2e9, "byte/second")
    assert ncu_csv.number("n/a") is None and ncu_csv.parse("") == []


# ---- diagnoses ----

def test_memory_bound_softmax():
    d = diagnose(gpu_profile("ncu-memory-softmax.csv"))
    assert d.bound == "memory"
    # 537 MB in 135.9 us = 3.95 TB/s, 92% of the 4.3 TB/s copy
    assert d.dram_bandwidth == pytest.approx(3.953e12, rel=1e-3)
    assert d.sol == pytest.approx(0.919, abs=0.002)
    assert d.line.startswith("memory-bound: DRAM 3.95 TB/s, 92% of the 4.30 TB/s copy")
    assert d.line.endswith("92% of speed-of-light")


def test_latency_bound_names_occupancy_limiter_and_stalls():
    d = diagnose(gpu_profile("ncu-latency-jagged.csv"))
    assert d.bound == "latency" and d.sol < 0.6
    assert d.occupancy == pytest.approx(0.3457) and d.limiter == "registers"
    assert d.eligible_warps == pytest.approx(0.41)
    assert [s[0] for s in d.stalls] == ["long_scoreboard", "barrier", "short_scoreboard"]
    assert "limited by registers" in d.line and "0.41 eligible warps" in d.line


def test_compute_bound_matmul_weighs_kernels_by_duration():
    d = diagnose(gpu_profile("ncu-compute-matmul.csv"))
    assert d.bound == "compute" and d.kernels == 2
    assert d.tensor_pipe == pytest.approx((86.4 * 1412345) / (1412345 + 20480) / 100, rel=1e-4)
    assert d.sol == pytest.approx(d.compute_sol) and 0.8 < d.sol < 0.9
    assert "tensor pipe 85%" in d.line and "(2 kernels)" in d.line


def test_records_round_trip_and_tolerate_unknown_fields():
    p = gpu_profile("ncu-latency-jagged.csv")
    back = Profile.from_record(json.loads(json.dumps({**p.to_record(), "new": 1})))
    assert back == p
    d = diagnose(p)
    assert Diagnosis.from_record({**json.loads(json.dumps(d.to_record())), "x": 2}) == d
    assert diagnose(Profile.unavailable("ncu", "cuda", "no GPU\nmore")) is None


def test_cpu_counters_difference_and_diagnosis():
    loop, _ = perf.parse((FIX / "perf-stat-loop.csv").read_text())
    base, _ = perf.parse((FIX / "perf-stat-baseline.csv").read_text())
    counts = {k: v / 100 for k, v in perf.difference(loop, base).items()}  # 100 calls
    assert counts[m.INSTRUCTIONS] == pytest.approx((9123300457 - 5610220018) / 100)
    p = Profile("perf", True, device="cpu", kernels=(perf.kernel_of(counts),),
                copy_bandwidth=12e9, call_ms=8.3)
    d = diagnose(p)
    assert d.ipc == pytest.approx(3513080439 / 3106922868)
    assert d.bound == "memory" and d.line.startswith("memory-bound: IPC 1.13 (of 4)")
    slow = Profile("perf", True, device="cpu", kernels=(perf.kernel_of(counts),),
                   copy_bandwidth=12e9, call_ms=80.0)
    assert diagnose(slow).bound == "latency"


# ---- machines that cannot profile: one line, never a traceback ----

def test_perf_without_a_pmu_says_so():
    _, refused = perf.parse((FIX / "perf-stat-not-supported.csv").read_text())
    why = perf.why_failed("", refused)
    assert "cannot count hardware events" in why and "<not supported>" in why
    assert "perf_event_paranoid" in perf.why_failed(
        "Error:\nAccess to performance monitoring and observability operations is limited.\n"
        "Consider adjusting /proc/sys/kernel/perf_event_paranoid", [])


def test_ncu_failures_read_as_one_line():
    perm = ("==PROF== Connected to process 99\n==ERROR== ERR_NVGPUCTRPERM - The user does not "
            "have permission to access NVIDIA GPU Performance Counters on the target device 0.")
    assert "ERR_NVGPUCTRPERM" in ncu.why_failed(perm, 1)
    assert "no GPU performance counters" in ncu.why_failed(
        "==ERROR== Failed to initialize the profiler: LibraryNotLoaded", 1)
    assert "profiled no kernel" in ncu.why_failed("==WARNING== No kernels were profiled.", 0)
    # a vGPU is refused with the same sentence, without the code
    assert "ERR_NVGPUCTRPERM" in ncu.why_failed(
        "==ERROR== The user does not have permission to access NVIDIA GPU Performance "
        "Counters on the target vGPU device 0.", 1)
    assert "dcgmi profile --pause" in ncu.why_failed(
        "==ERROR== Profiling failed because a driver resource was unavailable. Ensure that "
        "no other tool (like DCGM) is concurrently collecting profiling data.", 1)
    assert ncu.unknown_metrics("==ERROR== Failed to find metric sm__bogus.sum") == \
        ["sm__bogus.sum"]
    # a name ncu expanded to its first-level sub-metrics is named as the expansion
    expanded = ("==ERROR== Failed to find metric "
                "regex:^smsp__warp_issue_stalled_gmma_per_warp_active\\.pct\\."
                "(sum|min|max|avg|pct|ratio|max_rate)$")
    assert ncu.unknown_metrics(expanded) == ["smsp__warp_issue_stalled_gmma_per_warp_active.pct"]
    assert ncu.unknown_metrics(expanded, m.NCU_METRICS) == [m.stall_metric("gmma")]
    bare = ("==ERROR== Failed to find metric "
            "regex:^sm__pipe_alu_cycles_active\\.(sum|min|max|avg|pct|ratio|max_rate)$")
    assert ncu.unknown_metrics(bare, m.NCU_METRICS) == [m.ALU_PIPE]
    for text in (perm, "boom"):
        assert "\n" not in ncu.why_failed(text, 3)


def test_ncu_command_flags():
    """The flags as ncu --help (2024.1.1) spells them; --print-units base stays, since that
    ncu printed auto-scaled units in CSV without it."""
    argv = ncu.command("/usr/local/cuda/bin/ncu", (m.DURATION, m.REGISTERS), "/tmp/x.csv",
                       ["python", "-m", "t"])
    line = " ".join(argv)
    for flags in ("--csv --page raw", "--print-units base", "--profile-from-start off",
                  "--clock-control none", "--target-processes all",
                  f"--metrics {m.DURATION},{m.REGISTERS}", "--log-file /tmp/x.csv"):
        assert flags in line
    assert argv[-3:] == ["python", "-m", "t"]


def test_missing_profilers_and_gpu(monkeypatch):
    monkeypatch.setattr(ncu, "find", lambda: None)
    with pytest.raises(ProfilerUnavailable, match="ncu .* not installed"):
        ncu.run(["true"], "/nonexistent/log.csv", 5)
    monkeypatch.setattr(perf, "find", lambda: None)
    with pytest.raises(ProfilerUnavailable, match="perf is not installed"):
        perf.run(["true"], "/nonexistent/out", 5)
    monkeypatch.setattr(profiler, "cuda_ready", lambda: "no CUDA device on this machine")
    p, d = profiler.profile_source(SPEC, "swiglu", "triton", "x = 1\n", "cuda")
    assert not p.ok and d is None and p.message == "no CUDA device on this machine"
    assert p.tool == "ncu"


REFUSED = {
    "plain": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "expanded": r"regex:^sm__pipe_alu_cycles_active\.(sum|min|max|avg|pct|ratio|max_rate)$",
}


def _fake_ncu(tmp_path, fixture: str, refused: str = REFUSED["plain"]) -> Path:
    """An 'ncu' that refuses one metric by name and otherwise writes ``fixture`` as its log."""
    exe = tmp_path / "ncu"
    exe.write_text(f"""#!/bin/sh
log=""; metrics=""
while [ $# -gt 0 ]; do
  case "$1" in --log-file) log="$2"; shift;; --metrics) metrics="$2"; shift;; esac; shift
done
case "$metrics" in *sm__pipe_alu_cycles_active*)
  printf '%s\\n' '==PROF== Connected to process 41872 (/usr/bin/python3.12)' \
    '==ERROR== Failed to find metric {refused}' > "$log"; exit 1;;
esac
cp {FIX / fixture} "$log"
""")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


@pytest.mark.parametrize("form", sorted(REFUSED))
def test_ncu_run_drops_metrics_it_does_not_know(tmp_path, monkeypatch, form):
    exe = _fake_ncu(tmp_path, "ncu-memory-softmax.csv", REFUSED[form])
    monkeypatch.setattr(ncu, "find", lambda: str(exe))
    kernels, missing = ncu.run(["python", "target.py"], str(tmp_path / "log.csv"), 30)
    assert [k.name for k in kernels] == ["_kd_softmax"]
    assert missing == (m.ALU_PIPE,)


def test_metrics_ncu_gave_no_value_for_are_listed():
    """An ncu may answer "n/a" for a metric the GPU lacks instead of refusing it."""
    ks = ncu_csv.parse((FIX / "ncu-latency-jagged.csv").read_text())
    assert ncu.no_value(ks, m.NCU_METRICS) == []
    assert ncu.no_value(ks, (m.DURATION, "dram__bytes_op_read.sum")) == \
        ["dram__bytes_op_read.sum"]


# ---- the CLI ----

def one_line(capsys, argv, rc: int, expect: str) -> None:
    assert main(argv) == rc
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert expect in err, err


def test_profile_command_bad_usage(capsys):
    one_line(capsys, ["profile", SPEC, "--backend", "c", "--genome", "{bad"], 2,
             "--genome is not valid JSON")
    one_line(capsys, ["profile", SPEC, "--backend", "c", "--genome", '{"nope": 1}'], 2,
             "unknown gene 'nope'")
    one_line(capsys, ["profile", SPEC, "--backend", "nosuch"], 2, "nosuch")
    one_line(capsys, ["profile", SPEC, "--op", "nosuch", "--backend", "c"], 2, "nosuch")


def test_profile_command_without_gpu_or_counters(capsys, monkeypatch):
    monkeypatch.setattr(profiler, "cuda_ready", lambda: "no CUDA device on this machine")
    one_line(capsys, ["profile", SPEC], 2, "--device cuda: no CUDA device")
    monkeypatch.setattr(perf, "find", lambda: None)
    one_line(capsys, ["profile", SPEC, "--backend", "c"], 1,
             "kdsl: profile: perf is not installed")


def test_search_options_bad_usage(capsys):
    base = ["search", SPEC, "--backend", "fake", "--executor", "inline", "--budget", "2",
            "--quiet", "--llm", "off", "--no-priors"]
    register()
    one_line(capsys, base + ["--stop-at-sol", "0.9"], 2, "give --profile K too")
    one_line(capsys, base + ["--profile", "1", "--stop-at-sol", "1.5"], 2, "(0, 1]")
    one_line(capsys, base + ["--profile", "-1"], 2, "--profile")


# ---- a search with profiles (a fake profiler) ----

@pytest.fixture
def fake_profiler(monkeypatch):
    """Every profile is the given fixture's; ``calls`` counts them."""
    calls = []

    def install(fixture: str, sol: float | None = None):
        def fake(spec, op_name, backend, source, device, **kw):
            calls.append(source)
            p = gpu_profile(fixture)
            d = diagnose(p)
            if sol is not None:
                d = Diagnosis(**{**d.__dict__, "sol": sol})
            return p, d
        monkeypatch.setattr(profiler, "profile_source", fake)
        return calls
    return install


def settings(**kw):
    register()
    base = dict(spec=SPEC, op=None, backends=("fake",), policy="mcts", seed=3, budget=12,
                executor="inline", use_priors=False, eval=EvalConfig(time=True), profile=1)
    base.update(kw)
    return SearchSettings(**base)


def test_search_records_profiles_and_show_prints_them(tmp_path, fake_profiler, capsys):
    calls = fake_profiler("ncu-latency-jagged.csv")
    store, summary = runs.start(settings(profile_during=2), tmp_path / "run", None,
                                QuietDisplay(), FakeExecutor())
    reopened = RunStore.open(tmp_path / "run")
    whens = [r["when"] for r in reopened.profiles]
    assert whens[:2] == ["search", "search"] and len(calls) == len(whens) <= 3
    assert all(r["diagnosis"]["bound"] == "latency" for r in reopened.profiles)
    assert [r["node"] for r in summary["profiles"]] == [r["node"] for r in reopened.profiles]
    assert main(["show", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "profiles" in out and "latency-bound" in out and "41%" in out
    assert main(["show", str(tmp_path / "run"), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["profiles"][0]["bound"] == "latency"


def test_early_stop_at_speed_of_light_and_resume_reads_recorded_profiles(
        tmp_path, fake_profiler):
    calls = fake_profiler("ncu-memory-softmax.csv")
    s = settings(budget=20, stop_at_sol=0.9, confirm_rounds=0)
    store, summary = runs.start(s, tmp_path / "run", None, QuietDisplay(), FakeExecutor())
    assert summary["evaluations"] < 20 and "speed-of-light" in summary["stopped_early"]
    made = len(calls)
    store2, summary2 = runs.resume(tmp_path / "run", display=QuietDisplay(),
                                   executor=FakeExecutor())
    assert summary2["evaluations"] == summary["evaluations"]  # stops at the same node
    assert len(calls) == made  # the recorded profiles were read, none made again


def test_profiles_off_leave_the_search_unchanged(tmp_path, fake_profiler):
    calls = fake_profiler("ncu-latency-jagged.csv")
    _, a = runs.start(settings(profile=0), tmp_path / "a", None, QuietDisplay(),
                      FakeExecutor())
    assert calls == [] and "profiles" not in a


# ---- what the diagnosis steers ----

SPACE = Space((Gene("reduce", ("onepass", "looped")), Gene("BLOCK_R", (1, 2, 4, 8), ordered=True),
               Gene("evict", ("none", "reread")), Gene("exp", ("tl", "ftz")),
               Gene("num_warps", (1, 2, 4, 8), ordered=True),
               Gene("num_stages", (1, 2, 3), ordered=True)))
OCCUPANCY = {"BLOCK_R", "num_warps", "num_stages"}


def _changed(op_name: str, diagnoses: dict, n: int = 300) -> float:
    ctx = Context(spaces={"t": SPACE}, key=lambda c: "k", diagnoses=diagnoses)
    parent = Candidate.of("t", SPACE.default())
    hits = 0
    for seed in range(n):
        child = RULE_OPERATORS[op_name].apply([parent], ctx, random.Random(seed))
        diff = {g for g, v in child.genes.items() if parent.genes[g] != v}
        hits += bool(diff & OCCUPANCY)
    return hits / n


def test_latency_bound_parents_mutate_occupancy_genes_first():
    latency = {"k": diagnose(gpu_profile("ncu-latency-jagged.csv")).to_record()}
    for op_name in ("mutate_one", "neighbour"):
        assert _changed(op_name, latency) > 0.75
    assert _changed("mutate_one", {}) < 0.6  # half of the genes, drawn uniformly
    names = [g.name for g in SPACE.genes]
    assert set(advice.ordered(latency["k"], names, random.Random(0))[:3]) == OCCUPANCY
    assert set(advice.first_genes(latency["k"], names)) == OCCUPANCY
    # the run's best's diagnosis stands in for a parent's own
    assert advice.diagnosis_for(Context(spaces={}, key=lambda c: "other",
                                        diagnoses={"best": latency["k"]}), None) == latency["k"]


def test_without_a_diagnosis_mutations_draw_as_before():
    ctx = Context(spaces={"t": SPACE}, key=lambda c: "k")
    parent = Candidate.of("t", SPACE.default())
    for seed in range(20):
        child = RULE_OPERATORS["mutate_one"].apply([parent], ctx, random.Random(seed))
        rng = random.Random(seed)
        mutable = list(SPACE.genes)
        [g] = rng.sample(mutable, 1)
        want = dict(SPACE.default())
        want[g.name] = rng.choice([v for v in g.values if v != want[g.name]])
        assert child.genes == want


def test_cost_model_features_with_and_without_a_profile():
    none = costmodel.profile_features(None)
    assert set(none) == {f"profile.{k}" for k in costmodel.PROFILE_FEATURES} | {"profile.bound"}
    assert all(math.isnan(v) for v in none.values())
    d = diagnose(gpu_profile("ncu-memory-softmax.csv")).to_record()
    f = costmodel.profile_features(d)
    assert f["profile.sol"] == pytest.approx(d["sol"]) and f["profile.bound"] == 0.0
    model = costmodel.CostModel(seed=0)
    model.add({"x": 1.0}, 1.0)
    model.set_context(f)
    for i in range(8):
        model.add({"x": float(i)}, 1.0 + i)
    assert math.isnan(model.rows[0][0].get("profile.sol", math.nan))
    assert model.rows[-1][0]["profile.sol"] == pytest.approx(d["sol"])
    if costmodel.available():
        preds = model.predict([{"x": 2.0}, {"x": 7.0}])
        assert preds is not None and preds[1] > preds[0]
        assert "profile.sol" in model.columns


def test_prompt_text_and_retrieval_words():
    d = diagnose(gpu_profile("ncu-latency-jagged.csv")).to_record()
    text = advice.prompt_text(d)
    assert text.startswith("latency-bound:") and "more warps" in text
    assert advice.prompt_text(None) == "(not profiled)"
    assert "num_warps" in advice.words(d) and "long_scoreboard" in advice.words(d)
    pytest.importorskip("bm25s")
    from kdsl.knowledge.retrieval import retrieve
    notes = retrieve(f"jagged softmax\n{advice.words(d)}", "triton", "h200", "segment", 6000)
    assert "guidance/profile-diagnoses.md" in [n.path for n in notes]
