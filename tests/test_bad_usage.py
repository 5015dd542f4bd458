"""Bad usage gets one clear line and exit code 2: never a traceback, never a damaged run.

Places that cannot be written (``--out`` under /proc, a read-only directory, a
regular file), run directories that are not runs or were damaged by hand, and
an export into a directory that does not exist.
"""
from __future__ import annotations

import os
import shutil

import msgpack
import pytest

from kdsl.cli import main
from kdsl.search import runs
from kdsl.search.display import QuietDisplay
from kdsl.search.jobs import EvalConfig
from kdsl.search.runstore import LINEAGE
from kdsl.search.settings import SearchSettings

from fakes import FakeExecutor, register

SPEC = "specs/swiglu.kspec"
FAKE = ["--backend", "fake", "--executor", "inline", "--budget", "2", "--no-priors",
        "--quiet", "--llm", "off"]
COMPARE = ["--backend", "fake", "--executor", "inline", "--budget", "2", "--seeds", "0",
           "--policies", "greedy", "--quiet", "--llm", "off"]


@pytest.fixture(autouse=True)
def fake_backend():
    register()


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    register()
    root = tmp_path_factory.mktemp("runs") / "good"
    s = SearchSettings(spec=SPEC, op="swiglu", backends=("fake",), policy="mcts", seed=3,
                       budget=6, executor="inline", use_priors=False,
                       eval=EvalConfig(time=True))
    runs.start(s, root, None, QuietDisplay(), FakeExecutor())
    return root


def one_line_error(capsys, argv, expect: str | None = None) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, (argv, captured.out, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("kdsl: error:"), err
    if expect:
        assert expect in err, err
    return err


def read_only_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    if os.access(d, os.W_OK):  # root writes anywhere: nothing to test here
        d.chmod(0o755)
        pytest.skip("a read-only directory is writable for this user (root)")
    return d


# ---- --out where nothing can be written ----

@pytest.mark.parametrize("where", ["/proc/kdsl-run", "/proc/self/kdsl/run", "/sys/kdsl-run"])
def test_search_out_under_proc_or_sys(capsys, where):
    one_line_error(capsys, ["search", SPEC, *FAKE, "--out", where], "--out")


def test_search_out_under_a_regular_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    one_line_error(capsys, ["search", SPEC, *FAKE, "--out", str(tmp_path / "f" / "run")],
                   "not a directory")
    assert (tmp_path / "f").read_text() == "x"


def test_search_out_under_a_read_only_directory(tmp_path, capsys):
    ro = read_only_dir(tmp_path)
    one_line_error(capsys, ["search", SPEC, *FAKE, "--out", str(ro / "run")], "not writable")
    assert list(ro.iterdir()) == []


def test_search_cache_where_nothing_can_be_written(tmp_path, capsys):
    one_line_error(capsys, ["search", SPEC, *FAKE, "--out", str(tmp_path / "r"),
                            "--cache", "/proc/kdsl/cache.sqlite"], "--cache")
    assert not (tmp_path / "r").exists()  # nothing made before the error


@pytest.mark.parametrize("where", ["/proc/kdsl-compare", "/sys/kdsl-compare"])
def test_compare_out_under_proc_or_sys(capsys, where):
    one_line_error(capsys, ["compare", SPEC, *COMPARE, "--out", where], "--out")


def test_compare_out_under_a_read_only_directory(tmp_path, capsys):
    ro = read_only_dir(tmp_path)
    one_line_error(capsys, ["compare", SPEC, *COMPARE, "--out", str(ro / "c")])


@pytest.mark.parametrize("where", ["/proc/kdsl.py", "/sys/kdsl.py"])
def test_export_out_under_proc_or_sys(good_run, capsys, where):
    one_line_error(capsys, ["export", str(good_run), "--out", where], "--out")


def test_export_into_a_missing_directory(good_run, tmp_path, capsys):
    one_line_error(capsys, ["export", str(good_run), "--out", str(tmp_path / "no" / "k.py")],
                   "does not exist")
    assert not (tmp_path / "no").exists()


def test_export_onto_a_directory(good_run, tmp_path, capsys):
    one_line_error(capsys, ["export", str(good_run), "--out", str(tmp_path)], "is a directory")


def test_export_into_a_read_only_directory(good_run, tmp_path, capsys):
    ro = read_only_dir(tmp_path)
    one_line_error(capsys, ["export", str(good_run), "--out", str(ro / "k.py")])


def test_export_writes_where_it_may(good_run, tmp_path, capsys):
    assert main(["export", str(good_run), "--out", str(tmp_path / "k.py")]) == 0
    assert "def run(" in (tmp_path / "k.py").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["k.py"]  # no temporary file left


def test_show_plot_where_nothing_can_be_written(good_run, capsys):
    one_line_error(capsys, ["show", str(good_run), "--plot", "/proc/kdsl.png"], "--plot")


# ---- run directories that are not runs, or were damaged ----

def rewrite(run, tmp_path, name, change):
    """A copy of ``run`` whose records went through ``change(records)``."""
    dst = tmp_path / name
    shutil.copytree(run, dst)
    records = list(msgpack.Unpacker(open(dst / LINEAGE, "rb"), raw=False,
                                    strict_map_key=False))
    change(records)
    (dst / LINEAGE).write_bytes(b"".join(msgpack.packb(r) for r in records))
    return dst


def _no_settings(rs):
    rs[0].pop("settings")


def _no_result(rs):
    rs[2].pop("result")


def _result_not_a_record(rs):
    rs[1]["result"] = "ok"


def _result_without_ok(rs):
    rs[1]["result"] = {"speedup": 2.0}


def _bad_id(rs):
    rs[3]["id"] = "three"


def _settings_of_wrong_kind(rs):
    rs[0]["settings"]["budget"] = "many"


def _settings_without_spec(rs):
    rs[0]["settings"].pop("spec")


def _source_path_outside(rs):
    rs[1]["source_path"] = "../../../etc/passwd"


DAMAGE = {"header without settings": (_no_settings, "no settings"),
          "node without result": (_no_result, "has no 'result'"),
          "result not a record": (_result_not_a_record, "has no 'result'"),
          "result without ok": (_result_without_ok, "without 'ok'"),
          "node id not a number": (_bad_id, "integer 'id'"),
          "source path outside the run": (_source_path_outside, "outside the run"),
          "settings of the wrong kind": (_settings_of_wrong_kind, "setting 'budget'"),
          "settings without a spec": (_settings_without_spec, "setting 'spec'")}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("command", ["show", "resume", "export"])
def test_a_damaged_run_is_one_line_and_stays_as_it_was(good_run, tmp_path, capsys, damage,
                                                      command):
    change, expect = DAMAGE[damage]
    run = rewrite(good_run, tmp_path, "bad", change)
    if damage.startswith("settings") and command == "show":
        pytest.skip("show reads the summary, not the settings")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    argv = [command, str(run)] + (["--out", str(tmp_path / "k.py")] if command == "export"
                                  else [])
    one_line_error(capsys, argv, expect)
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # nothing written into a run that cannot be used


@pytest.mark.parametrize("command", ["show", "resume", "export"])
def test_not_a_run(tmp_path, capsys, command):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    extra = ["--out", str(tmp_path / "k.py")] if command == "export" else []
    one_line_error(capsys, [command, str(tmp_path / "empty"), *extra], "not a kdsl run")
    if command != "show":  # show of a file reads it as a spec
        one_line_error(capsys, [command, str(tmp_path / "file"), *extra], "not a kdsl run")
        one_line_error(capsys, [command, str(tmp_path / "nothing"), *extra], "not a kdsl run")


def test_a_header_only_run_resumes_and_shows(good_run, tmp_path, capsys):
    """A run killed before its first node is a run, not an error."""
    run = rewrite(good_run, tmp_path, "fresh", lambda rs: rs.__delitem__(slice(1, None)))
    assert main(["show", str(run)]) == 0
    store, summary = runs.resume(run, None, QuietDisplay(), FakeExecutor())
    assert summary["evaluations"] == 6


def test_resume_with_its_spec_copy_gone(good_run, tmp_path, capsys):
    run = tmp_path / "nospec"
    shutil.copytree(good_run, run)
    (run / "spec.kspec").unlink()
    one_line_error(capsys, ["resume", str(run)], "spec.kspec")


def test_a_failed_start_leaves_no_directory_behind(tmp_path, capsys, monkeypatch):
    """Creation that fails half-way (a disk that fills) removes what it made."""
    from kdsl.search import runstore

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(runstore, "atomic_write", full)
    one_line_error(capsys, ["search", SPEC, *FAKE, "--out", str(tmp_path / "a" / "b")],
                   "no space left on device")
    assert not (tmp_path / "a").exists()


def test_records_that_do_not_match_this_kdsl_are_one_line(good_run, tmp_path, capsys):
    def other_key(rs):
        rs[3]["key"] = "not-what-this-kdsl-proposes"
    run = rewrite(good_run, tmp_path, "diverged", other_key)
    before = (run / LINEAGE).read_bytes()
    assert main(["resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err  # the replayed nodes' progress lines, then the error
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("kdsl: error: resume diverged at node 3")
    assert (run / LINEAGE).read_bytes() == before
