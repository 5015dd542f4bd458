"""bench/wait_clock.py: bad usage and a machine without a GPU are one line and exit 2."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import wait_clock  # noqa: E402


@pytest.mark.parametrize("args", [["--loads", "spin"], ["--loads", ","], ["--mb", "0"],
                                  ["--rounds", "0"]])
def test_bad_usage_is_one_line_and_exit_2(tmp_path, capsys, args):
    assert wait_clock.main(["--out", str(tmp_path / "w.json"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wait_clock: error:") and len(err.strip().splitlines()) == 1, err


def test_no_gpu_is_one_line_and_exit_2(tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert wait_clock.main(["--out", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.json").exists()
