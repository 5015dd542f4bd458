"""Diagnostics for specs: ``FILE:LINE:COL: error: message`` with the line and a caret."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    column: int
    message: str

    def render(self, text: str | None) -> str:
        head = f"{self.file}:{self.line}:{self.column}: error: {self.message}"
        if not text or self.line < 1:
            return head
        lines = text.splitlines()
        if self.line > len(lines):
            return head
        src = lines[self.line - 1]
        if len(src) > 200:  # keep a huge line readable: show a window around the caret
            start = max(0, self.column - 80)
            src = src[start:start + 160]
            caret_col = self.column - start
        else:
            caret_col = self.column
        src = src.replace("\t", " ")
        return f"{head}\n  {src}\n  {' ' * max(caret_col - 1, 0)}^"


class SpecError(Exception):
    """One or more diagnostics for one spec file."""

    def __init__(self, diagnostics: list[Diagnostic], text: str | None = None):
        super().__init__(diagnostics[0].message if diagnostics else "spec error")
        self.diagnostics = diagnostics
        self.text = text

    def render(self) -> str:
        return "\n".join(d.render(self.text) for d in self.diagnostics)


class UsageError(Exception):
    """Bad command-line usage: one line, exit code 2."""
