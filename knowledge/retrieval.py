"""Which notes go into a prompt: filter by front matter, rank by BM25, fit a token budget.

1. A note is eligible when its ``backend``, ``hardware`` and ``op_class`` each
   are ``any`` or name the value asked for (``notes.matches``).
2. Eligible ``constraints/`` notes come first, in path order: they are the
   rules, not suggestions, so relevance does not reorder or drop them.
3. The other eligible notes are ranked by BM25 relevance of their title,
   topics and body to the query (the op's spec text plus the parent's
   feedback), normalised to [0, 1], plus 0.25 for each of backend, hardware
   and op class the note names explicitly: a Hopper note beats a generic one
   for an H200 query even when the words match less well.
4. Notes are taken in that order while they fit ``budget_tokens`` (tokens
   estimated as characters / 4). A note is never cut: one that does not fit
   is skipped and a smaller one later in the order may still go in.
"""
from __future__ import annotations

import functools
import re

from kdsl import extras

from .notes import Note, load, matches, specificity

SPECIFICITY_BONUS = 0.25
_STOP = frozenset("""a an and are as at be but by for from has have if in into is it its of on or
so such that the their then there these this to was were when which while will with without
you your can may must not no do does than each per""".split())


def tokenize(text: str) -> list[str]:
    """Lower-case words and numbers; ``num_warps`` also yields ``num`` and ``warps``."""
    out = []
    for w in re.findall(r"[a-z0-9_]+", text.lower()):
        parts = [p for p in w.split("_") if p]
        for t in ([w] + parts if len(parts) > 1 else parts):
            if t not in _STOP and (len(t) > 1 or t.isdigit()):
                out.append(t)
    return out


def _document(note: Note) -> list[str]:
    # Title and topics count twice: they say what the note is about.
    head = f"{note.title} {' '.join(note.topic)} {' '.join(note.op_class)}"
    return tokenize(head) * 2 + tokenize(note.body)


@functools.lru_cache(maxsize=32)
def _index(notes: tuple[Note, ...]):
    extras.require("retrieving notes for the LLM operators", "bm25s")
    import bm25s
    retriever = bm25s.BM25()
    retriever.index([_document(n) for n in notes], show_progress=False)
    vocab = set(retriever.vocab_dict)
    return retriever, vocab


def relevance(query: str, notes: tuple[Note, ...]) -> list[float]:
    """BM25 scores of ``notes`` for ``query``, scaled so the best is 1 (all 0 without a match)."""
    if not notes:
        return []
    retriever, vocab = _index(notes)
    words = [t for t in tokenize(query) if t in vocab]
    if not words:
        return [0.0] * len(notes)
    scores = [float(s) for s in retriever.get_scores(words)]
    top = max(scores)
    return [s / top if top > 0 else 0.0 for s in scores]


def rank(query: str, notes: list[Note], backend: str, hardware: str,
         op_class: str) -> list[Note]:
    """``notes`` best first (see the module docstring); ties keep path order."""
    rel = relevance(query, tuple(notes))
    scored = [(-(r + SPECIFICITY_BONUS * specificity(n, backend, hardware, op_class)), n.path, n)
              for r, n in zip(rel, notes)]
    return [n for _, _, n in sorted(scored, key=lambda t: (t[0], t[1]))]


def retrieve(query: str, backend: str, hardware: str, op_class: str, budget_tokens: int,
             notes: tuple[Note, ...] | None = None) -> list[Note]:
    """The notes for one prompt: eligible constraints first, then the best-ranked others.

    ``notes`` defaults to the shipped knowledge base; the sum of the returned
    notes' ``tokens`` never exceeds ``budget_tokens``.
    """
    pool = [n for n in (load() if notes is None else notes)
            if matches(n, backend, hardware, op_class)]
    constraints = [n for n in pool if n.kind == "constraints"]
    others = rank(query, [n for n in pool if n.kind != "constraints"], backend, hardware,
                  op_class)
    chosen, left = [], budget_tokens
    for n in constraints + others:
        if n.tokens <= left:
            chosen.append(n)
            left -= n.tokens
    return chosen


def render(notes: list[Note]) -> str:
    """Notes as one Markdown text for a prompt, in the order given."""
    return "\n".join(n.text for n in notes)
