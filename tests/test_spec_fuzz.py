"""Spec fuzzing (``bench/spec_fuzz.py``): mutants of the library's specs never end in a
traceback and are accepted or rejected in under 2 s; and the failures that fuzzing found,
each an exit-2 ``FILE:LINE:COL: error:`` through the real command line."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdsl import cli

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
HEAD = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>\S.*)$")
MB = 1 << 20


def _load_fuzzer():
    spec = importlib.util.spec_from_file_location("spec_fuzz", ROOT / "bench" / "spec_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["spec_fuzz"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


spec_fuzz = _load_fuzzer()


def test_seeded_mutants_give_no_traceback_and_none_is_slow():
    records = spec_fuzz.fuzz(300, seed=7, cases=1, agreement=True)
    s = spec_fuzz.summary(records)
    assert s["count"] == 300
    assert s["tracebacks"] == 0, s["failures"][:3]
    # the 2 s target is the bench's to measure on a quiet machine (bench/spec_fuzz.py); a
    # unit test on a shared machine catches only the blow-ups (a quadratic pass took 26 s)
    assert all(r.front_s < 10 * spec_fuzz.TARGET_S for r in records), s["slowest_front"][:3]
    assert s["outcomes"].get("rejected", 0) > 100  # the mutations do break specs
    assert len(s["mutations"]) == len(spec_fuzz.MUTATORS)  # and every kind is drawn


def test_mutants_are_reproducible():
    corpus = spec_fuzz.library()
    assert spec_fuzz.mutant(3, 41, corpus) == spec_fuzz.mutant(3, 41, corpus)
    assert spec_fuzz.mutant(3, 41, corpus) != spec_fuzz.mutant(4, 41, corpus)


# ---- the named failures, through the command line -----------------------------------

LIB = {p.stem: p.read_text() for p in SPECS.glob("*.kspec")}
SOFTMAX, JAGGED, BAG = LIB["softmax"], LIB["jagged_softmax"], LIB["embedding_bag_sum"]


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


REGRESSIONS = {
    # (text, words in the message, (line, column))
    "400-digit integer in a tolerance": (_edit(SOFTMAX, "rtol=1e-5", "rtol=" + "9" * 400),
                                         "integer 9999999999...9999 (400 digits) is too large",
                                         (10, 22)),
    "400-digit integer in a test range": (_edit(SOFTMAX, "1..300", "1.." + "9" * 400),
                                          "is too large; integers in a spec are 64-bit", (11, 17)),
    "5000-digit integer (past Python's int parsing limit)":
        (_edit(SOFTMAX, "1..300", "1.." + "9" * 5000), "(5000 digits) is too large", (11, 17)),
    "offsets[b + 2**70] in a reduction range": (
        _edit(JAGGED, "offsets[b + 1]", "offsets[b + 2**70]"),
        "subscript 0 of 'offsets' may take any value", (7, 46)),
    "offsets[b + 2**70] in a bag": (_edit(BAG, "offsets[b + 1]", "offsets[b + 2**70]"),
                                    "subscript 0 of 'offsets'", (8, 46)),
    "offsets[b + 2**70 literal]": (_edit(BAG, "offsets[b + 1]", "offsets[b + 1180591620717411303424]"),
                                   "integer 1180591620717411303424 is too large", (8, 48)),
    "offsets read past the end in a range": (
        _edit(JAGGED, "offsets[b + 1]", "offsets[b + 9000000000000000000]"),
        "index out of range: subscript 0 of 'offsets' reaches 1..9000000000000000000", (7, 46)),
    "power tower in a size": (_edit(SOFTMAX, "bench M=32768", "bench M=((2**64)**64)**64"),
                              "integer arithmetic too large", (12, 13)),
    "power tower in a baseline": (_edit(SOFTMAX, "dim=-1", "dim=2**64**64"),
                                  "baseline arithmetic too large", (9, 33)),
    "1e400 in a tolerance": (_edit(SOFTMAX, "rtol=1e-5", "rtol=1e400"),
                             "too large for a float", (10, 22)),
    "265 KB spec": (SOFTMAX * (265_000 // len(SOFTMAX)), "a spec is at most 32,768 bytes", None),
    "1 MB spec": (SOFTMAX * (MB // len(SOFTMAX)), "a spec is at most 32,768 bytes", None),
    "1 MB line of a sum": (_edit(SOFTMAX, "exp(x[i, j] - m[i])", " + ".join(["x[i, j]"] * (MB // 10))),
                           "a spec is at most", None),
}


@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_regression_is_a_located_exit_2(name, tmp_path, capsys):
    text, words, where = REGRESSIONS[name]
    path = tmp_path / "bad.kspec"
    path.write_text(text)
    t0 = time.perf_counter()
    rc = cli.main(["check", "--cases", "1", str(path)])
    took = time.perf_counter() - t0
    out = capsys.readouterr()
    assert rc == 2, out.err[-2000:]
    first = out.err.splitlines()[0]
    m = HEAD.match(first)
    assert m and m["file"] == str(path), first
    assert words in m["msg"], first
    if where is not None:
        assert (int(m["line"]), int(m["col"])) == where, first
    assert "Traceback" not in out.err and out.out == ""
    assert took < 2.0, f"{took:.2f} s"


def test_regression_through_a_fresh_process(tmp_path):
    """The real ``python -m kdsl check``: exit 2, one located line first, no traceback."""
    path = tmp_path / "bad.kspec"
    path.write_text(_edit(BAG, "offsets[b + 1]", "offsets[b + 1180591620717411303424]"))
    r = subprocess.run([sys.executable, "-m", "kdsl", "check", str(path)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert HEAD.match(r.stderr.splitlines()[0]), r.stderr[:500]
    assert "Traceback" not in r.stderr
