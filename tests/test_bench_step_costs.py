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
