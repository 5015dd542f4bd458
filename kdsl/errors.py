"""Diagnostics for specs: ``FILE:LINE:COL: error: message`` with the line and a caret."""
from __future__ import annotations

from dataclasses import dataclass

MAX_SHOWN = 50  # diagnostics rendered for one file; the rest are counted


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    column: int
    message: str

    def render(self, text: str | None) -> str:
        return self.render_lines(text.splitlines() if text else [])

    def render_lines(self, lines: list[str]) -> str:
        head = f"{self.file}:{self.line}:{self.column}: error: {self.message}"
        if self.line < 1 or self.line > len(lines):
            return head
        src = lines[self.line - 1]
        if len(src) > 200:  # keep a huge line readable: show a window around the caret
            start = max(0, self.column - 80)
            src = src[start:start + 160]
            caret_col = self.column - start
        else:
            caret_col = self.column
        # tabs and control characters print as one column each, so the caret stays aligned
        src = "".join(c if c.isprintable() else " " if c == "\t" else "?" for c in src)
        return f"{head}\n  {src}\n  {' ' * max(caret_col - 1, 0)}^"


class SpecError(Exception):
    """One or more diagnostics for one spec file."""

    def __init__(self, diagnostics: list[Diagnostic], text: str | None = None):
        super().__init__(diagnostics[0].message if diagnostics else "spec error")
        self.diagnostics = diagnostics
        self.text = text

    def render(self, limit: int = MAX_SHOWN) -> str:
        """The first ``limit`` diagnostics (the text is split into lines once)."""
        lines = self.text.splitlines() if self.text else []
        shown = [d.render_lines(lines) for d in self.diagnostics[:limit]]
        if len(self.diagnostics) > limit:
            shown.append(f"{self.diagnostics[0].file}: {len(self.diagnostics) - limit} more "
                         f"errors not shown")
        return "\n".join(shown)


class UsageError(Exception):
    """Bad command-line usage: one line, exit code 2."""
