"""The measurement cache's key: a measurement is served only to the environment that made it
(kdsl version, generator sources, device model, torch and triton versions)."""
from __future__ import annotations

import importlib.metadata
import sys

import pytest

import kdsl
from kdsl import backends
from kdsl.search import cache as cache_mod
from kdsl.search.cache import MeasurementCache, environment, generator_hash, scope_key
from kdsl.search.result import Result

ENV = {"kdsl": "0.1.0", "generators": {"c": "aaaa"}, "device": "cuda",
       "device_model": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0"}
CHANGES = {"kdsl": "0.2.0", "generators": {"c": "bbbb"}, "device_model": "NVIDIA H100 80GB HBM3",
           "torch": "2.13.0", "triton": "none", "device": "cpu"}


def test_the_same_environment_gives_the_same_key():
    assert scope_key(ENV) == scope_key(dict(reversed(list(ENV.items()))))
    assert scope_key(ENV) == scope_key({**ENV, "generators": dict(ENV["generators"])})


@pytest.mark.parametrize("part", list(CHANGES))
def test_a_change_of_any_part_changes_the_key(part):
    assert scope_key({**ENV, part: CHANGES[part]}) != scope_key(ENV)


def test_a_change_of_any_part_misses_a_shared_cache(tmp_path):
    path = tmp_path / "shared.sqlite"
    ok = Result(True, "timing", time_ms=1.0, baseline_ms=2.0, baseline_name="eager")
    first = MeasurementCache(path, env=ENV)
    first.put("cand:cfg", ok)
    first.close()
    same = MeasurementCache(path, env=dict(ENV))
    assert same.get("cand:cfg") == ok
    same.close()
    for part, value in CHANGES.items():
        other = MeasurementCache(path, env={**ENV, part: value})
        assert other.get("cand:cfg") is None, part
        other.close()


def test_the_environment_names_every_part():
    env = environment("cpu", ("c", "triton"))
    assert env["kdsl"] == kdsl.__version__
    assert env["torch"] == importlib.metadata.version("torch")
    assert set(env["generators"]) == {"c", "triton"}
    assert all(len(h) == 16 for h in env["generators"].values())
    assert env["generators"]["c"] != env["generators"]["triton"]
    assert env["device_model"] == cache_mod.device_model("cpu") != ""
    # a run's cache is scoped by it
    c = MeasurementCache(None, "cpu", ("c", "triton"))
    assert c.env == env and c.scope == scope_key(env)
    c.close()


def test_the_cpu_model_comes_from_cpuinfo():
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in text.splitlines()
             if line.split(":", 1)[0].strip() == "model name"]
    if not names:
        pytest.skip("this CPU names no model")
    assert cache_mod.device_model("cpu") == names[0]


def test_the_gpu_model_is_the_device_name(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA H200")
    cache_mod.device_model.cache_clear()
    try:
        assert cache_mod.device_model("cuda") == "NVIDIA H200"
        assert environment("cuda", ("c",))["device_model"] == "NVIDIA H200"
    finally:
        cache_mod.device_model.cache_clear()


def test_a_missing_package_is_none(monkeypatch):
    real = importlib.metadata.version

    def version(name):
        if name == "triton":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(importlib.metadata, "version", version)
    cache_mod.package_version.cache_clear()
    try:
        assert cache_mod.package_version("triton") == "none"
        assert environment("cpu", ("c",))["triton"] == "none"
    finally:
        cache_mod.package_version.cache_clear()


def test_each_part_is_computed_once_per_process():
    generator_hash("c")
    cache_mod.device_model("cpu")
    hits = generator_hash.cache_info().hits, cache_mod.device_model.cache_info().hits
    environment("cpu", ("c",))
    assert generator_hash.cache_info().hits > hits[0]
    assert cache_mod.device_model.cache_info().hits > hits[1]


def test_the_generator_hash_covers_the_package_and_the_shared_lowering():
    labels = [label for label, _ in cache_mod._files_of("c")]
    assert "c/render.py" in labels and "c/backend.py" in labels
    assert any(label.startswith("lower/") for label in labels)
    assert not any(label.startswith("triton/") for label in labels)
    assert generator_hash("no-such-backend") == "unknown"


def test_an_edit_to_a_generator_changes_its_hash(tmp_path, monkeypatch):
    mod = tmp_path / "kdsl_test_plugin_backend.py"
    mod.write_text("class Plugin:\n    name = 'plugin'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import kdsl_test_plugin_backend as plugin
    monkeypatch.setitem(backends.REGISTRY, "plugin", plugin.Plugin())
    generator_hash.cache_clear()
    try:
        before = generator_hash("plugin")
        assert before != "unknown"
        generator_hash.cache_clear()
        assert generator_hash("plugin") == before  # the same sources, the same hash
        mod.write_text("class Plugin:\n    name = 'plugin'  # rendered differently now\n")
        generator_hash.cache_clear()
        assert generator_hash("plugin") != before
    finally:
        generator_hash.cache_clear()
        sys.modules.pop("kdsl_test_plugin_backend", None)
