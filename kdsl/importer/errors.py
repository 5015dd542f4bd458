"""Why an import failed, as one line (the CLI prints it and exits 2)."""
from __future__ import annotations


class ImportFailure(Exception):
    """A module that cannot become a spec: a bad file, an export failure, an unmapped op."""


class Unmapped(ImportFailure):
    """An ATen op (or one of its argument forms) that the mapping table has no entry for."""

    def __init__(self, op: str, why: str = ""):
        super().__init__(f"no index-notation mapping for ATen op {op}" + (f" ({why})" if why else ""))
        self.op = op
