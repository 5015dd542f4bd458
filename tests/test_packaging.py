"""Packaging: every package and data file reaches the wheel, and the optional dependencies are
optional (a plain install runs check and search; a feature without its extra is one clear line).

The wheel itself is built, installed into a fresh virtualenv and run by .ci/wheel (make test).
"""
from __future__ import annotations

import fnmatch
import os
import runpy
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from kdsl import extras
from kdsl.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR = PYPROJECT["tool"]["setuptools"]["package-dir"]
OPTIONAL = ("triton", "anthropic", "matplotlib", "bm25s", "lightgbm")
SPEC = str(ROOT / "specs" / "rmsnorm.kspec")


def _setup_packages() -> list[str]:
    return runpy.run_path(str(ROOT / "setup.py"), run_name="setup_under_test")["packages"]()


def _tracked(folder: str) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                              folder], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.stdout.splitlines() if (ROOT / p).is_file()]


def test_every_folder_of_python_modules_is_a_package_in_the_wheel():
    # A folder of modules without __init__.py imports in an editable install (a namespace
    # package) and is missing from the wheel: both halves of that are checked here.
    found = set(_setup_packages())
    assert {"kdsl", "kdsl.search", "kdsl.backends", "kdsl.knowledge", "kdsl.specs"} <= found
    for name, folder in PACKAGE_DIR.items():
        for d, subdirs, files in os.walk(ROOT / folder):
            subdirs[:] = [s for s in subdirs if s != "__pycache__"]
            if not any(f.endswith(".py") for f in files):
                continue
            rel = Path(d).relative_to(ROOT / folder)
            assert (Path(d) / "__init__.py").exists(), f"{Path(folder, rel)}/ has no __init__.py"
            assert ".".join((name, *rel.parts)) in found, f"{Path(folder, rel)}/ not packaged"


def test_every_data_file_is_package_data():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]
    for name, folder in PACKAGE_DIR.items():
        for path in _tracked(folder):
            rel = Path(path).relative_to(folder).as_posix()
            if rel.endswith(".py"):
                continue
            # setuptools' '**' also matches no folder at all
            globs = [g for p in patterns.get(name, ()) for g in (p, p.replace("**/", ""))]
            assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{path} is not package data"


def test_each_extra_brings_what_the_error_names():
    deps = PYPROJECT["project"]["optional-dependencies"]
    for module, extra in extras.EXTRA_OF.items():
        assert any(d.startswith(module) for d in deps[extra]), (module, extra)
    assert deps["all"] == [f"{extras.DISTRIBUTION}[triton,llm,plot,model]"]
    assert PYPROJECT["project"]["name"] == extras.DISTRIBUTION
    assert not [d for d in PYPROJECT["project"]["dependencies"] if d.split(">")[0] in OPTIONAL]
    assert "-e '.[dev,ray,all]'" in (ROOT / "Makefile").read_text()  # the tests need all


# A process in which the optional packages cannot be imported, as after a plain install.
BLOCKED = textwrap.dedent(f"""
    import sys
    class Blocked:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {OPTIONAL!r}:
                raise ImportError("blocked: " + name)
    sys.meta_path.insert(0, Blocked())
""")


def _blocked(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", BLOCKED + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_every_module_imports_without_the_optional_packages():
    # each is imported by the function that needs it, so check runs and every module loads
    out = _blocked(f"""
        import importlib, pkgutil
        from kdsl.cli import main
        assert main(["check", {SPEC!r}]) == 0
        for package in {_setup_packages()!r}:
            importlib.import_module(package)
            for m in pkgutil.iter_modules(sys.modules[package].__path__, package + "."):
                if not m.name.endswith(".__main__"):
                    importlib.import_module(m.name)
        print("loaded:", sorted(m for m in {OPTIONAL!r} if m in sys.modules))
    """)
    assert out.returncode == 0, out.stderr
    assert "loaded: []" in out.stdout


def test_a_feature_without_its_extra_is_one_line_naming_the_extra(tmp_path):
    out = _blocked(f"""
        import os
        from kdsl.cli import main
        os.environ["ANTHROPIC_API_KEY"] = "not-a-key"  # never sent: the check comes first
        base = ["search", {SPEC!r}, "--budget", "1", "--executor", "inline",
                "--out", {str(tmp_path / "run")!r}]
        print("triton", main(base + ["--backend", "triton", "--device", "cpu", "--llm", "off"]))
        print("llm", main(base + ["--backend", "c", "--llm", "anthropic"]))
        print("replay", main(base + ["--backend", "c", "--llm", "replay"]))
        from kdsl.search.llm.setup import resolve_mode
        print("auto", resolve_mode("auto"))
    """)
    assert out.returncode == 0, out.stderr
    for line in ("triton 2", "llm 2", "replay 2", "auto off"):
        assert line in out.stdout.splitlines(), out.stdout
    errors = out.stderr.splitlines()
    assert len(errors) == 3 and "Traceback" not in out.stderr, out.stderr
    assert "needs triton" in errors[0] and "'kdsl-kernels[triton]'" in errors[0]
    assert "anthropic and bm25s" in errors[1] and "'kdsl-kernels[llm]'" in errors[1]
    assert "--llm replay needs bm25s" in errors[2] and "'kdsl-kernels[llm]'" in errors[2]


def test_retrieval_without_bm25s_names_the_extra(monkeypatch):
    from kdsl.knowledge import retrieval
    monkeypatch.setattr(extras, "installed", lambda module: module != "bm25s")
    retrieval._index.cache_clear()
    with pytest.raises(UsageError, match=r"needs bm25s.*'kdsl-kernels\[llm\]'"):
        retrieval.retrieve("softmax rows", "triton", "h200", "row_reduction", 4000)
    retrieval._index.cache_clear()


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    from kdsl.search import plots
    monkeypatch.setattr(extras, "installed", lambda module: module != "matplotlib")
    with pytest.raises(UsageError, match=r"--plot needs matplotlib.*'kdsl-kernels\[plot\]'"):
        plots.run_figure([], str(tmp_path / "run.png"))
    with pytest.raises(UsageError, match=r"kdsl-kernels\[plot\]"):
        plots.compare_figure({}, str(tmp_path / "compare.png"))


def test_with_the_extras_installed_nothing_is_refused():
    pytest.importorskip("triton")
    pytest.importorskip("anthropic")
    for module in OPTIONAL:
        assert extras.installed(module)
    from kdsl.search import plots
    plots.require()
