"""The language's commands: ``kdsl check``, ``kdsl show``, ``kdsl cases`` and bad usage.

Run in-process through ``kdsl.cli.main`` (fast); one test goes through a real process
to prove that what reaches the terminal is a located error, not a traceback.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kdsl import cli

SPECS = Path(__file__).resolve().parent.parent / "specs"
SOFTMAX = SPECS.joinpath("softmax.kspec").read_text()
HEAD = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def write(tmp_path):
    def _write(text: str, name: str = "op.kspec") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p
    return _write


# ---- check ----

def test_check_good_spec(capsys):
    rc, out, err = run(capsys, "check", "--cases", "2", SPECS / "swiglu.kspec")
    assert rc == 0, err
    assert out == "ok swiglu: 3 dtypes, baseline agrees on 6 cases\n"
    assert err == ""


def test_check_singular_dtype_and_several_files(capsys):
    rc, out, err = run(capsys, "check", "--cases", "3", "--seed", "4",
                       SPECS / "hash_bucketize.kspec", SPECS / "sort_rows.kspec")
    assert rc == 0, err
    assert out.splitlines() == ["ok hash_bucketize: 1 dtype, baseline agrees on 3 cases",
                                "ok sort_rows: 2 dtypes, baseline agrees on 6 cases"]


def test_check_bad_spec_is_located(capsys, write):
    path = write(SOFTMAX.replace("exp(x[i, j] - m[i])", "exp(x[i, j] - q[i])"))
    rc, out, err = run(capsys, "check", path)
    assert rc == 2 and out == ""
    head, src, caret = err.splitlines()
    m = HEAD.match(head)
    assert m and m["file"] == str(path) and (m["line"], m["col"]) == ("7", "27")
    assert m["msg"] == "unknown tensor 'q'"
    assert src == "  " + path.read_text().splitlines()[6]
    assert caret == " " * 28 + "^"


def test_check_baseline_that_disagrees_with_the_math(capsys, write):
    path = write(SOFTMAX.replace("torch.softmax(x, dim=-1)", "torch.log_softmax(x, dim=-1)"))
    rc, out, err = run(capsys, "check", "--cases", "2", path)
    assert rc == 2 and out == ""
    lines = err.splitlines()
    assert re.fullmatch(rf"{re.escape(str(path))}:2:4: error: baseline of 'softmax' disagrees "
                        r"with the reference on 6 of 6 cases", lines[0]), lines[0]
    assert 1 <= len(lines) - 1 <= 5  # at most five failing cases are listed
    assert all(line.startswith("  f32 ") or line.startswith("  bf16") or line.startswith("  f16")
               for line in lines[1:])
    assert "elements outside rtol=" in lines[1]


def test_check_baseline_that_raises(capsys, write):
    path = write(SOFTMAX.replace("torch.softmax(x, dim=-1)", "torch.softmax(x, dim=5)"))
    rc, _, err = run(capsys, "check", "--cases", "1", path)
    assert rc == 2
    assert "disagrees with the reference on 3 of 3 cases" in err
    assert "baseline raised IndexError" in err
    assert "Traceback" not in err


def test_check_baseline_with_wrong_output_count(capsys, write):
    path = write(SPECS.joinpath("topk_rows.kspec").read_text().replace(
        "torch.topk(x, K, dim=-1)", "torch.topk(x, K, dim=-1).values"))
    rc, _, err = run(capsys, "check", "--cases", "1", path)
    assert rc == 2
    assert "baseline raised BaselineError: baseline returned 1 value(s) but op 'topk_rows' " \
           "has 2 output(s)" in err


def test_check_reports_every_bad_file_and_goes_on(capsys, write):
    bad1 = write("op\n", "a.kspec")
    bad2 = write(SOFTMAX.replace("  baseline torch.softmax(x, dim=-1)\n", ""), "b.kspec")
    rc, out, err = run(capsys, "check", "--cases", "1", bad1, SPECS / "gelu_tanh.kspec", bad2)
    assert rc == 2
    assert out == "ok gelu_tanh: 3 dtypes, baseline agrees on 3 cases\n"
    heads = [line for line in err.splitlines() if HEAD.match(line)]
    assert [HEAD.match(h)["file"] for h in heads] == [str(bad1), str(bad2)]


def test_check_integer_dtype_with_a_tolerance_table(capsys, write):
    """An op over f32 | i64 lists tolerances for f32 only; its i64 cases compare exactly."""
    path = write(SPECS.joinpath("sort_rows.kspec").read_text().replace(
        "tolerance exact", "tolerance f32(rtol=1e-6, atol=1e-6)"))
    rc, out, err = run(capsys, "check", "--cases", "2", path)
    assert rc == 0, err
    assert out == "ok sort_rows: 2 dtypes, baseline agrees on 4 cases\n"


# ---- show ----

def test_show_prints_the_ir(capsys):
    rc, out, err = run(capsys, "show", SPECS / "embedding_bag_sum.kspec")
    assert rc == 0, err
    lines = out.splitlines()
    assert re.fullmatch(r"op embedding_bag_sum  \(hash [0-9a-f]{16}\)", lines[0])
    assert "  dims V, D, B, L" in lines
    assert "  in  idx: i64 [L] in 0..V" in lines
    assert "  in  offsets: i64 [B + 1] offsets(L)" in lines
    assert "  y[b, d] = sum(i in offsets[b] .. offsets[b + 1]) table[idx[i], d]" in lines
    assert "  tolerance f32(rtol=0.0001, atol=0.0001) bf16(rtol=0.016, atol=0.05) " \
           "f16(rtol=0.002, atol=0.005)" in lines
    assert "  bench cpu: V=1000000, D=128, B=8192, L=163840, dtype=f32" in lines


def test_show_resolved_intermediates(capsys):
    rc, out, _ = run(capsys, "show", SPECS / "softmax.kspec")
    assert rc == 0
    assert "  tmp m: f32 [M]" in out.splitlines()
    assert "  y[i, j] = e[i, j] / sum(j in 0 .. N) e[i, j]" in out.splitlines()


def test_show_picks_an_op(capsys, write):
    path = write(SOFTMAX + SPECS.joinpath("swiglu.kspec").read_text())
    rc, out, _ = run(capsys, "show", path)
    assert rc == 0 and out.count("\nop ") + out.startswith("op ") == 2
    rc, out, _ = run(capsys, "show", path, "--op", "swiglu")
    assert rc == 0 and out.startswith("op swiglu ") and "softmax" not in out
    rc, out, err = run(capsys, "show", path, "--op", "gelu")
    assert rc == 2 and out == ""
    assert err == f"kdsl: error: no op 'gelu' in {path}; it declares softmax, swiglu\n"


def test_show_bad_spec(capsys, write):
    path = write("op a\n  dims N\n  in x: f33 [N]\n")
    rc, out, err = run(capsys, "show", path)
    assert rc == 2 and out == ""
    assert err.startswith(f"{path}:3:9: error: unknown dtype 'f33'")


# ---- cases ----

def test_cases_lists_shapes(capsys):
    rc, out, err = run(capsys, "cases", SPECS / "topk_rows.kspec", "--seed", "3", "--cases", "4")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "op topk_rows (seed 3)"
    assert len(lines) == 1 + 2 * 4  # two dtypes, four cases each
    rows = [re.fullmatch(r"  +(\d+) (f32|i64) +(\w+) +M=(\d+), N=(\d+), K=(\d+)", line)
            for line in lines[1:]]
    assert all(rows), lines
    assert [r[1] for r in rows] == ["0", "1", "2", "3"] * 2
    assert {r[2] for r in rows} == {"f32", "i64"}
    assert all(int(r[6]) <= int(r[5]) for r in rows)  # where K <= N
    assert "duplicates" in {r[3] for r in rows}


def test_cases_seed_is_deterministic_and_matters(capsys):
    path = SPECS / "jagged_softmax.kspec"
    a = run(capsys, "cases", path, "--seed", "1")[1]
    b = run(capsys, "cases", path, "--seed", "1")[1]
    c = run(capsys, "cases", path, "--seed", "2")[1]
    assert a == b
    assert a != c and c.startswith("op jagged_softmax (seed 2)\n")


# ---- bad usage: one line, exit code 2 ----

@pytest.mark.parametrize("argv,words", [
    ([], "the following arguments are required: command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["check"], "the following arguments are required: files"),
    (["show"], "the following arguments are required: file"),
    (["cases", "x.kspec", "--seed", "abc"], "argument --seed: invalid int value: 'abc'"),
    (["check", "--bogus", "x.kspec"], "unrecognized arguments: --bogus"),
])
def test_bad_usage_is_one_line(capsys, argv, words):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kdsl: error: ")
    assert words in err


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["check", "--help"])
    assert info.value.code == 0
    assert "usage: kdsl check" in capsys.readouterr().out


# ---- through a real process ----

def test_real_process_reports_without_traceback(tmp_path):
    bad = tmp_path / "bad.kspec"
    bad.write_bytes(b"op a\n  y[i] = " + b"(" * 10_000 + b"\n\xff\x00")
    deep = tmp_path / "deep.kspec"
    deep.write_text("op a\n  y[i] = " + "-" * 5000 + "x\n")
    proc = subprocess.run([sys.executable, "-m", "kdsl", "check", str(bad), str(deep),
                           str(tmp_path / "missing.kspec"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    heads = [line for line in proc.stderr.splitlines() if HEAD.match(line)]
    assert [HEAD.match(h)["file"] for h in heads] == [str(bad), str(deep),
                                                      str(tmp_path / "missing.kspec"),
                                                      str(tmp_path)]
    assert "not UTF-8 text (byte 0xff)" in heads[0]
    assert "expression nested deeper than" in heads[1]
    script = Path(sys.executable).with_name("kdsl")
    if script.exists():
        proc = subprocess.run([str(script), "nonsense"], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.startswith("kdsl: error: argument command: invalid choice")
