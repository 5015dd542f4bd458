"""The command line as a user meets it: help and defaults on every option, --version,
resume --budget N as N more, show DIR's candidates table and --json, --baseline."""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re

import pytest

import kdsl
from kdsl import cli
from kdsl.cli import main
from kdsl.search import runs
from kdsl.search.commands import ResumeDisplay, settings_from
from kdsl.search.display import LogDisplay, QuietDisplay
from kdsl.search.jobs import EvalConfig
from kdsl.search.settings import SearchSettings

from fakes import FakeExecutor, register
from small_specs import rmsnorm

SPEC = rmsnorm()


def subcommands() -> dict[str, argparse.ArgumentParser]:
    p = cli._build()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def options():
    for name, parser in subcommands().items():
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                yield name, action


# ---- help, defaults, version ----

def test_every_option_of_every_subcommand_has_help():
    missing = [(name, a.option_strings or a.dest) for name, a in options()
               if not a.help or a.help == argparse.SUPPRESS]
    assert not missing, missing
    assert set(subcommands()) >= {"check", "show", "cases", "eval", "search", "resume",
                                  "compare", "knowledge", "export"}
    top = cli._build()
    assert all(a.help for a in top._actions if a.option_strings)


def test_every_option_that_takes_a_value_shows_its_default():
    """Either the formatter shows the default, or the help says what leaving it out does."""
    fmt = cli._Help("kdsl")
    silent = []
    for name, a in options():
        if not a.option_strings or a.required or a.nargs == 0:
            continue  # positionals, required options and on/off flags have none
        text = fmt._get_help_string(a)
        if "%(default)s" not in text and "(default: " not in text:
            silent.append((name, a.option_strings))
    assert not silent, silent


def test_help_prints_defaults(capsys):
    with pytest.raises(SystemExit) as info:
        main(["search", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--budget N candidates to evaluate (default: 30)" in out
    assert "(default: mcts)" in out and "(default: pool)" in out and "(default: auto)" in out
    assert "--out DIR" in out and "(default: None)" not in out and "(default: False)" not in out


def test_out_says_file_or_directory(capsys):
    helps = {name: next(a.help for a in p._actions if "--out" in a.option_strings)
             for name, p in subcommands().items()
             if any("--out" in a.option_strings for a in p._actions)}
    assert "directory" in helps["search"] and "directory" in helps["compare"]
    assert "file" in helps["export"] and "not a directory" in helps["export"]


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"kdsl {kdsl.__version__}"


def test_budget_must_be_positive(capsys):
    assert main(["search", "specs/swiglu.kspec", "--budget", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kdsl: error:") and "--budget" in err and len(err.splitlines()) == 1


def test_show_options_for_runs_are_refused_for_a_spec(capsys):
    assert main(["show", "specs/swiglu.kspec", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "kdsl: error: --json is for run directories, and specs/swiglu.kspec is not one"


@pytest.mark.parametrize("choice", ["auto", "eager", "compile"])
def test_baseline_flag_reaches_the_evaluation(choice):
    for command in ("search", "compare"):
        argv = [command, "specs/swiglu.kspec", "--baseline", choice]
        argv += ["--out", "x"] if command == "compare" else []
        args = cli._build().parse_args(argv)
        assert settings_from(args, "mcts", 0).eval.baseline == choice
    default = cli._build().parse_args(["search", "specs/swiglu.kspec"])
    assert settings_from(default, "mcts", 0).eval.baseline == "auto"


# ---- resume: what is replayed is not shown as new ----

def test_resume_says_what_it_replays(tmp_path):
    register()
    s = SearchSettings(spec="specs/swiglu.kspec", op="swiglu", backends=("fake",), seed=1,
                       budget=4, executor="inline", use_priors=False,
                       eval=EvalConfig(time=True))
    store, _ = runs.start(s, tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    recorded = {r["id"] for r in store.nodes}
    log = tmp_path / "log.txt"
    with open(log, "w") as stream:
        display = ResumeDisplay(LogDisplay(stream), recorded, "R", stream)
        store, summary = runs.resume(tmp_path / "r", display=display, executor=FakeExecutor(),
                                     more=3)
    lines = log.read_text().splitlines()
    assert summary["evaluations"] == 7 and len(store.nodes) == 7
    assert lines[0].startswith("resuming: 4 evaluations recorded (replayed from the run, "
                               "not run again), 3 more to run")
    assert lines[1].startswith("replayed 4 recorded evaluations")
    new = lines[2:]
    assert len(new) == 3 and all(re.match(r"\[[567]/7\] node ", x) for x in new), new
    # nothing more to run: it says how to ask for more
    with open(log, "w") as stream:
        display = ResumeDisplay(LogDisplay(stream), {r["id"] for r in store.nodes}, "R",
                                stream)
        runs.resume(tmp_path / "r", None, display, FakeExecutor())
    assert "'kdsl resume R --budget N' runs N more" in log.read_text()


def test_resume_takes_a_total_or_a_number_more_not_both(tmp_path):
    register()
    s = SearchSettings(spec="specs/swiglu.kspec", op="swiglu", backends=("fake",), budget=2,
                       executor="inline", use_priors=False)
    runs.start(s, tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    with pytest.raises(kdsl.errors.UsageError):
        runs.resume(tmp_path / "r", 5, QuietDisplay(), FakeExecutor(), more=1)
    with pytest.raises(kdsl.errors.UsageError, match="at least 1"):
        runs.resume(tmp_path / "r", None, QuietDisplay(), FakeExecutor(), more=0)


# ---- a real run through the command line: search, resume --budget 1, show ----

@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """search --budget 2 then resume --budget 1 on the c backend, with torch.compile as
    the CPU baseline; (run dir, the resume's stdout, its stderr)."""
    tmp = tmp_path_factory.mktemp("polish")
    spec = tmp / "rmsnorm_small.kspec"
    spec.write_text(SPEC)
    run = tmp / "run"
    out, err = io.StringIO(), io.StringIO()  # (capsys is for one test, not a module)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["search", str(spec), "--backend", "c", "--executor", "inline",
                     "--budget", "2", "--out", str(run), "--llm", "off", "--no-priors",
                     "--baseline", "compile", "--quiet"]) == 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["resume", str(run), "--budget", "1", "--quiet"]) == 0
    return run, out.getvalue(), err.getvalue()


def test_resume_budget_is_that_many_more(real_run):
    run, out, err = real_run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["evaluations"] == 3 and summary["budget"] == 3
    assert "evaluations: 3 (2 recorded before, 1 new)" in out
    assert "resuming: 2 evaluations recorded" in err
    progress = [x for x in err.splitlines() if x.startswith("[")]
    assert len(progress) == 1 and progress[0].startswith("[3/3] node 3 "), err
    # the baseline chosen at the start holds for the resumed evaluations too
    assert summary["baseline"]["name"] == "torch.compile"


def _numbers(text: str) -> list[str]:
    return re.findall(r"(?<![\w.])\d+\.\d+(?:e[-+]\d+)?", text)


def _is_rounded(number: str, digits: int) -> bool:
    mantissa = number.split("e")[0]
    whole, frac = mantissa.split(".")
    significant = (whole + frac).lstrip("0")
    return len(frac) <= 3 or len(significant) <= digits


def test_show_lists_every_candidate_rounded(real_run, capsys):
    run, _, _ = real_run
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "candidates (3;" in out and "lineage of the best kernel" in out
    table = out[out.index("candidates (3;"):out.index("lineage of the best kernel")]
    rows = [line for line in table.splitlines() if re.match(r"\W*\d+\s", line)]
    assert len(rows) == 3, table
    assert all(" ok " in r and " ms " in r and "x " in r for r in rows), rows
    numbers = _numbers(out)
    assert numbers and all(_is_rounded(n, 4) for n in numbers), numbers


def test_show_top_lists_the_fastest(real_run, capsys):
    run, _, _ = real_run
    assert main(["show", str(run), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "the 1 fastest of 3 candidates" in out


def test_show_json_lists_every_candidate(real_run, capsys):
    run, _, _ = real_run
    assert main(["show", str(run), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["summary"]["evaluations"] == 3
    cands = record["candidates"]
    assert [c["id"] for c in cands] == sorted(c["id"] for c in cands) and len(cands) == 3
    for c in cands:
        assert {"id", "parents", "operator", "backend", "ok", "stage", "time_ms", "speedup",
                "best", "on_best_lineage"} <= set(c)
        assert c["backend"] == "c" and c["ok"] and c["time_ms"] > 0
    best = [c for c in cands if c["best"]]
    assert len(best) == 1 and best[0]["id"] == record["summary"]["best"]["node"]
    assert record["best_lineage"][-1] == best[0]["id"]
    floats = re.findall(r"\d+\.\d+(?:e[-+]\d+)?", json.dumps(record))
    assert all(_is_rounded(n, 6) for n in floats), floats
    env = record["summary"]["environment"]
    assert env["kdsl"] == kdsl.__version__ and env["generators"]["c"]
