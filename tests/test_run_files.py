"""Run-directory files survive a kill mid-write: kernels, summary and copies are written
atomically, a torn lineage tail is cut before the next append, and resume rewrites a
kernel file that an older kdsl left truncated."""
from __future__ import annotations

import os
import shutil

import msgpack
import pytest

from kdsl.cli import main
from kdsl.search import files, runs
from kdsl.search.display import QuietDisplay
from kdsl.search.jobs import EvalConfig
from kdsl.search.lineage import source_hash
from kdsl.search.runstore import LINEAGE, RunStore
from kdsl.search.settings import SearchSettings

from fakes import FakeExecutor, register

SPEC = "specs/swiglu.kspec"


@pytest.fixture(autouse=True)
def fake_backend():
    register()


def settings(**kw):
    base = dict(spec=SPEC, op=None, backends=("fake",), policy="mcts", seed=3, budget=12,
                executor="inline", use_priors=False, eval=EvalConfig(time=True))
    base.update(kw)
    return SearchSettings(**base)


def strip(nodes):
    return [{k: v for k, v in r.items() if k != "time"} for r in nodes]


class Killed(BaseException):
    """Stands for SIGKILL arriving mid-write (nothing after it runs)."""


def test_a_kill_mid_write_leaves_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    files.atomic_write(path, "old\n")

    def die(fd):
        raise Killed
    monkeypatch.setattr(files.os, "fsync", die)
    with pytest.raises(Killed):
        files.atomic_write(path, "new " * 10_000)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp left


def test_kernels_are_written_atomically(tmp_path, monkeypatch):
    store = RunStore.create(tmp_path / "r", {"settings": {}}, "spec")
    src = "def kernel(i, o, s):\n    pass\n" * 100
    real = os.replace

    def killed_before_rename(a, b):
        raise Killed
    monkeypatch.setattr(files.os, "replace", killed_before_rename)
    with pytest.raises(Killed):
        store.write_kernel(source_hash(src), src, "py")
    assert list((tmp_path / "r" / "kernels").iterdir()) == []  # nothing torn in place
    monkeypatch.setattr(files.os, "replace", real)
    rel = store.write_kernel(source_hash(src), src, "py")  # the next try writes it whole
    assert (tmp_path / "r" / rel).read_text() == src


def test_a_damaged_kernel_file_is_written_again(tmp_path):
    store = RunStore.create(tmp_path / "r", {"settings": {}}, "spec")
    src = "x = 1\n" * 50
    rel = store.write_kernel(source_hash(src), src, "py")
    (tmp_path / "r" / rel).write_text(src[:17])  # as a kill left it under an older kdsl
    store.write_kernel(source_hash(src), src, "py")
    assert (tmp_path / "r" / rel).read_text() == src


def test_resume_rewrites_truncated_kernels(tmp_path, capsys):
    full, summary = runs.start(settings(), tmp_path / "r", None, QuietDisplay(),
                               FakeExecutor())
    damaged = {}
    for r in full.nodes:
        if r.get("source_path"):
            p = tmp_path / "r" / r["source_path"]
            damaged[p] = p.read_text()
            p.write_text(damaged[p][:5])  # torn
    best = tmp_path / "r" / summary["best"]["source_path"]
    best.write_text("")
    kernel = tmp_path / "r" / summary["best"]["node_source_path"]
    # export refuses the damaged kernel, and says how to mend it
    assert main(["export", str(tmp_path / "r"), "--out", str(tmp_path / "k.py")]) == 2
    assert "damaged" in capsys.readouterr().err
    store, _ = runs.resume(tmp_path / "r", 14, QuietDisplay(), FakeExecutor())
    for p, text in damaged.items():
        assert p.read_text() == text, p
    assert best.read_text() == kernel.read_text()
    assert store.damaged_kernels() == []
    assert main(["export", str(tmp_path / "r"), "--out", str(tmp_path / "k.py")]) == 0


def test_resume_removes_a_kernel_it_cannot_rebuild(tmp_path, capsys):
    runs.start(settings(), tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    (tmp_path / "r" / "cache.sqlite").unlink()  # nowhere left to find the sources
    store = RunStore.open(tmp_path / "r")
    rel = next(r["source_path"] for r in store.nodes if r.get("source_path"))
    (tmp_path / "r" / rel).write_text("tor")
    # the fake backend renders something else than the fake executor evaluated
    runs.resume(tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    assert "cannot be rebuilt" in capsys.readouterr().err
    assert not (tmp_path / "r" / rel).exists()


def test_resume_after_a_torn_record_keeps_the_lineage_readable(tmp_path):
    full, _ = runs.start(settings(), tmp_path / "full", None, QuietDisplay(), FakeExecutor())
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "full", killed)
    blob = b"".join(msgpack.packb(r) for r in [full.header] + full.nodes[:5])
    (killed / LINEAGE).write_bytes(blob + msgpack.packb(full.nodes[5])[:-7])
    runs.resume(killed, None, QuietDisplay(), FakeExecutor())
    again = RunStore.open(killed)  # the torn bytes were cut, not left between records
    assert strip(again.nodes) == strip(full.nodes)
    store, summary = runs.resume(killed, 16, QuietDisplay(), FakeExecutor())
    assert len(RunStore.open(killed).nodes) == 16


def test_summary_and_spec_copy_leave_no_temporary_files(tmp_path):
    runs.start(settings(), tmp_path / "r", None, QuietDisplay(), FakeExecutor())
    names = {p.name for p in (tmp_path / "r").rglob("*")}
    assert not [n for n in names if n.endswith(".tmp")], names
