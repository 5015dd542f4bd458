"""Turning a model's reply into kernel source: a fenced full source, or SEARCH/REPLACE edits.

An edit whose SEARCH text does not occur exactly once in the parent is an
error with that reason (a failed child), never silently skipped: a partly
applied rewrite is a different kernel from the one the model meant.
"""
from __future__ import annotations

import re

EDIT = re.compile(r"<<<<<<< SEARCH\n(.*?)\n?=======\n(.*?)\n?>>>>>>> REPLACE", re.S)
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)\n?```", re.S)


class ReplyError(Exception):
    """The reply cannot be turned into source; the message says why."""


def apply_edits(parent: str, edits: list[tuple[str, str]]) -> str:
    out = parent
    for n, (search, replace) in enumerate(edits, 1):
        count = out.count(search)
        if count == 0:
            first = search.strip().splitlines()[0] if search.strip() else "(empty)"
            raise ReplyError(f"edit {n} of {len(edits)}: its SEARCH text does not occur in the "
                             f"parent (first line: {first[:80]!r})")
        if count > 1:
            raise ReplyError(f"edit {n} of {len(edits)}: its SEARCH text occurs {count} times; "
                             "it must match exactly once")
        out = out.replace(search, replace, 1)
    return out


def source_from_reply(text: str, parent: str | None, language: str) -> str:
    """The new source the reply describes. Edits win over fences (edits may sit in fences)."""
    edits = EDIT.findall(text)
    if edits:
        if parent is None:
            raise ReplyError("the reply has SEARCH/REPLACE edits but there is no parent to edit")
        return apply_edits(parent, edits)
    blocks = FENCE.findall(text)
    if not blocks:
        raise ReplyError("the reply has neither a fenced source block nor SEARCH/REPLACE edits")
    wanted = {"c": ("c", "cpp", "c++"), "python": ("python", "py", "")}[language]
    matching = [body for lang, body in blocks if lang.lower() in wanted]
    chosen = matching or [body for _, body in blocks]
    # the longest block is the kernel; short ones are usually usage notes
    src = max(chosen, key=len)
    if not src.strip():
        raise ReplyError("the reply's source block is empty")
    return src if src.endswith("\n") else src + "\n"
