"""bench/step_costs.py: a judged evaluation's round trips split into the judge's phases."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import step_costs  # noqa: E402


def test_a_missing_spec_is_one_line_and_exit_2(capsys, tmp_path):
    assert step_costs.main(["--device", "cpu", "--out", str(tmp_path), "no.kspec"]) == 2
    err = capsys.readouterr().err
    assert "no spec file no.kspec" in err and len(err.strip().splitlines()) == 1


def test_a_spec_that_does_not_parse_is_one_line_and_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.kspec"
    bad.write_text("op broken\n  dims N\n")
    assert step_costs.main(["--device", "cpu", "--out", str(tmp_path), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("step_costs: error:") and len(err.strip().splitlines()) == 1, err


def test_the_phases_of_every_round_trip_add_up_to_its_wall(tmp_path):
    spec = str(ROOT / "specs" / "kernelbench" / "level1" / "19_relu.kspec")
    assert step_costs.main(["--device", "cpu", "--poll", "off", "--out", str(tmp_path),
                            spec]) == 0
    result = json.loads((tmp_path / "step-costs.json").read_text())["results"]["off"]
    r = result["kb19_relu"]
    assert r["ok"], r["message"]
    assert {"probe of 1", "probe of 8"} <= set(r["trips"]) and \
        any(k.startswith("step of") for k in r["trips"])
    for kind, trip in r["trips"].items():
        phases = sum(trip[p]["min"] for p in step_costs.PHASES)
        # each phase's least is at most its share of the least wall, and the wall is
        # those phases and nothing else (medians of parts need not add up; minima bound)
        assert phases <= trip["wall"]["min"] * 1.05 + 0.05, (kind, trip)
        assert trip["beyond_samples"]["median"] >= 0, (kind, trip)
        # the candidate's own trace, on the same clock: its parts fall inside the wall
        inside = trip["to_candidate"]["min"] + trip["to_judge"]["min"]
        assert 0 <= inside <= trip["wall"]["min"] * 1.05 + 0.05, (kind, trip)


def test_bad_set_counts_are_one_line_and_exit_2(capsys, tmp_path):
    spec = str(ROOT / "specs" / "kernelbench" / "level1" / "19_relu.kspec")
    for bad in ("0", "2,x"):
        assert step_costs.main(["--device", "cpu", "--sets", bad, "--out", str(tmp_path),
                                spec]) == 2
        err = capsys.readouterr().err
        assert "--sets" in err and len(err.strip().splitlines()) == 1, err


def test_a_forced_set_count_is_what_each_step_calls(tmp_path):
    """With --sets 1,3 every timed step has one call, then three (the probes do not change);
    three only where the bench point's oracle is cheap (``timing.CHEAP_ORACLE_S``), two
    otherwise: on a loaded host the oracle can take longer."""
    spec = str(ROOT / "specs" / "kernelbench" / "level1" / "19_relu.kspec")
    assert step_costs.main(["--device", "cpu", "--poll", "off", "--sets", "1,3", "--out",
                            str(tmp_path), spec]) == 0
    results = json.loads((tmp_path / "step-costs.json").read_text())["results"]
    for mode, n in (("off, 1 sets", 1), ("off, 3 sets", 3)):
        r = results[mode]["kb19_relu"]
        assert r["ok"], r["message"]
        sets = r["input_sets"]
        assert sets == n or (n > 2 and sets == 2), sets
        assert r["clock"]["calls_a_step"] == sets
        assert {k for k in r["trips"] if k.startswith("step of")} <= {f"step of {m}"
                                                                       for m in range(1, n + 1)}


def test_bad_probe_gaps_are_one_line_and_exit_2(capsys, tmp_path):
    spec = str(ROOT / "specs" / "kernelbench" / "level1" / "19_relu.kspec")
    for bad in ("-1", "x"):
        assert step_costs.main(["--device", "cpu", "--probe-gap-ms", bad, "--out",
                                str(tmp_path), spec]) == 2
        err = capsys.readouterr().err
        assert "--probe-gap-ms" in err and len(err.strip().splitlines()) == 1, err


def test_repeated_runs_of_a_mode_are_compared(tmp_path, capsys):
    """--repeat 2: each mode twice, in fresh processes, and one kernel's figures across the
    runs set side by side with its own timer's and their spread."""
    spec = str(ROOT / "specs" / "kernelbench" / "level1" / "19_relu.kspec")
    assert step_costs.main(["--device", "cpu", "--poll", "off", "--repeat", "2", "--out",
                            str(tmp_path), spec]) == 0
    results = json.loads((tmp_path / "step-costs.json").read_text())["results"]
    assert set(results) == {"off", "off, run 2"}
    out = capsys.readouterr().out
    agreement = out[out.index("| mode | op | figures ms |"):]  # (after the main table)
    row = next(line for line in agreement.splitlines() if line.startswith("| off | kb19_relu |"))
    figs = [results[m]["kb19_relu"]["time_ms"] for m in ("off", "off, run 2")]
    spread = float(row.split("|")[5])
    assert abs(spread - max(figs) / min(figs)) < 1e-3, (row, figs)


def test_the_agreement_table_reads_each_mode_s_runs():
    def r(ms, own):
        return {"ok": True, "time_ms": ms, "claimed_median_ms": own}
    text = step_costs.agreement({"on": {"a": r(0.2, 0.1)}, "on, run 2": {"a": r(0.3, 0.1)},
                                 "on, run 3": {"a": {"ok": False, "time_ms": None}}})
    assert "| on | a | 0.2 / 0.3 | 0.1 / 0.1 | 1.500 | 2.000 / 3.000 |" in text, text


def test_a_bad_repeat_is_one_line_and_exit_2(capsys, tmp_path):
    spec = str(ROOT / "specs" / "kernelbench" / "level1" / "19_relu.kspec")
    for bad in ("0", "x", "101"):
        assert step_costs.main(["--device", "cpu", "--repeat", bad, "--out", str(tmp_path),
                                spec]) == 2
        err = capsys.readouterr().err
        assert "--repeat" in err and len(err.strip().splitlines()) == 1, err
