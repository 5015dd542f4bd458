"""``kdsl import``: a PyTorch module in KernelBench's form becomes a ``.kspec`` spec.

load the file -> torch.export (core ATen, dynamic dims) -> each ATen op through the mapping
table to index notation -> spec text (checked by the language's own parser and checker)
-> agreement with the module on a small case.
"""
from __future__ import annotations

from dataclasses import dataclass

from .agreement import Disagreement
from .errors import ImportFailure, Unmapped

__all__ = ["Imported", "ImportFailure", "Unmapped", "Disagreement", "import_model"]


@dataclass(frozen=True)
class Imported:
    name: str           # the op's name, from the file name
    spec_text: str      # the .kspec text
    checked: bool       # whether the spec was checked against the module's own output


def import_model(path: str, *, check: bool = True) -> Imported:
    """The spec of the module file at ``path``. Raises ``ImportFailure`` (a one-line reason:
    a bad file, an export failure, an ATen op with no mapping, a spec the language rejects,
    or, with ``check``, a spec that disagrees with the module)."""
    from .pipeline import build
    return build(path, check)
