"""Loading a KernelBench-form module file: ``Model``, ``get_inputs``, ``get_init_inputs``."""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ImportFailure


@dataclass
class Problem:
    name: str
    module: object  # the executed file, as a Python module

    def init_inputs(self) -> list:
        return list(self.module.get_init_inputs()) if hasattr(self.module, "get_init_inputs") else []

    def model(self, device: str | None = None):
        """A fresh ``Model`` (its parameters on ``device``; 'meta' allocates nothing)."""
        import torch
        try:
            if device is None:
                return self.module.Model(*self.init_inputs())
            with torch.device(device):
                return self.module.Model(*self.init_inputs())
        except Exception as e:
            raise ImportFailure(f"{self.name}: Model(*get_init_inputs()) raised "
                                f"{type(e).__name__}: {_first_line(e)}") from None

    def inputs(self, device: str | None = None) -> list:
        import torch
        try:
            if device is None:
                return list(self.module.get_inputs())
            with torch.device(device):
                return list(self.module.get_inputs())
        except Exception as e:
            raise ImportFailure(f"{self.name}: get_inputs() raised {type(e).__name__}: "
                                f"{_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def spec_name(path: str) -> str:
    """An op name from the file name: letters, digits and underscores, not starting with a digit."""
    stem = Path(path).stem.lower()
    name = "".join(c if c.isalnum() else "_" for c in stem).strip("_")
    while "__" in name:
        name = name.replace("__", "_")
    if not name or name[0].isdigit():
        name = f"m{name}"
    return name


def load(path: str) -> Problem:
    p = Path(path)
    if not p.is_file():
        raise ImportFailure(f"{path}: no such file")
    try:
        source = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ImportFailure(f"{path}: cannot read: {e}") from None
    try:
        compile(source, str(p), "exec")
    except SyntaxError as e:
        raise ImportFailure(f"{path}:{e.lineno}:{e.offset or 0}: syntax error: {e.msg}") from None
    mod_name = f"_kdsl_import_{spec_name(path)}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling inside the file look it up
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ImportFailure(f"{path}: running the file raised {type(e).__name__}: "
                            f"{_first_line(e)}") from None
    finally:
        sys.modules.pop(mod_name, None)
    for needed in ("Model", "get_inputs"):
        if not hasattr(module, needed):
            raise ImportFailure(f"{path}: no '{needed}' defined (KernelBench form: class Model, "
                                "get_inputs(), get_init_inputs())")
    return Problem(spec_name(path), module)
