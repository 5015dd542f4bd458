"""The LLM prompt templates (``prompts/*.md``): ``string.Template`` text with ``$placeholders``.

Every placeholder is documented in ``prompts/README.md``. ``render`` is strict
(a missing value is an error naming it); callers that fill fields from a
shared context may use ``string.Template.safe_substitute`` on ``template()``.
"""
from __future__ import annotations

import string
from pathlib import Path

from .notes import root

NAMES = ("system", "rewrite", "repair", "crossover", "draft")


def prompts_dir() -> Path:
    return root() / "prompts"


def text(name: str) -> str:
    if name not in NAMES:
        raise KeyError(f"no prompt template '{name}'; known: {', '.join(NAMES)}")
    return (prompts_dir() / f"{name}.md").read_text(encoding="utf-8")


def template(name: str) -> string.Template:
    return string.Template(text(name))


def placeholders(name: str) -> set[str]:
    """The ``$names`` a template uses."""
    t = template(name)
    found = set()
    for m in t.pattern.finditer(t.template):
        if m.group("invalid") is not None:
            raise ValueError(f"prompts/{name}.md: a stray '$' (write $$ for a dollar sign)")
        n = m.group("named") or m.group("braced")
        if n:
            found.add(n)
    return found


def render(name: str, values: dict[str, object]) -> str:
    """The template filled in; KeyError listing every placeholder ``values`` lacks."""
    missing = placeholders(name) - set(values)
    if missing:
        raise KeyError(f"prompts/{name}.md needs {', '.join(sorted(missing))}")
    return template(name).substitute({k: "" if v is None else str(v) for k, v in values.items()})
