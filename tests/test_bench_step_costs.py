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
