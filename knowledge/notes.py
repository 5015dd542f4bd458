"""The knowledge base's notes: Markdown files with a small front matter, loaded into ``Note``s.

A note looks like this (the four fields are required; a value is one word,
a ``[list, of, words]`` or ``any``)::

    ---
    backend: triton
    hardware: any
    op_class: [row_reduction]
    topic: [softmax, layernorm, online-softmax]
    ---
    # One-pass, looped and online row reductions
    ...

Notes live in ``constraints/`` (what a kernel may not do), ``guidance/``
(backend idioms) and ``hardware/`` (machine facts). ``index.md`` lists them;
``prompts/`` holds the prompt templates, which are not notes. The front
matter is parsed here by hand so the package needs no YAML library.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

FIELDS = ("backend", "hardware", "op_class", "topic")
NOTE_DIRS = ("constraints", "guidance", "hardware")
ANY = "any"


class NoteError(ValueError):
    """A note file that does not follow the format; the message names the file and line."""


@dataclass(frozen=True)
class Note:
    path: str                      # relative to the knowledge root, e.g. "guidance/triton-scans.md"
    backend: tuple[str, ...]
    hardware: tuple[str, ...]
    op_class: tuple[str, ...]
    topic: tuple[str, ...]
    title: str
    body: str                      # the Markdown after the front matter, title line included

    @property
    def kind(self) -> str:
        """'constraints', 'guidance' or 'hardware': the folder the note lives in."""
        return self.path.split("/", 1)[0]

    @property
    def text(self) -> str:
        """What goes into a prompt: the note without its front matter."""
        return self.body.strip() + "\n"

    @property
    def tokens(self) -> int:
        """Estimated prompt tokens (4 characters a token, rounded up)."""
        return estimate_tokens(self.text)

    def field(self, name: str) -> tuple[str, ...]:
        return getattr(self, name)


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def root() -> Path:
    """The installed knowledge folder (``knowledge/``, importable as ``kdsl.knowledge``)."""
    return Path(str(resources.files("kdsl.knowledge")))


def _values(raw: str, where: str) -> tuple[str, ...]:
    raw = raw.strip()
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise NoteError(f"{where}: a list must close with ']'")
        raw = raw[1:-1]
    values = tuple(v.strip().strip("'\"").lower() for v in raw.split(",") if v.strip())
    if not values:
        raise NoteError(f"{where}: empty value (write 'any' for no restriction)")
    if ANY in values and len(values) > 1:
        raise NoteError(f"{where}: 'any' cannot be combined with other values")
    return values


def parse(text: str, path: str = "<note>") -> Note:
    """A note from its file text; ``path`` (relative to the root) is kept on the note."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise NoteError(f"{path}:1: a note starts with a '---' front-matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise NoteError(f"{path}: the front matter is not closed with '---'") from None
    fields: dict[str, tuple[str, ...]] = {}
    for i in range(1, end):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        where = f"{path}:{i + 1}"
        key = key.strip()
        if not sep or key not in FIELDS:
            raise NoteError(f"{where}: expected one of {', '.join(FIELDS)} as 'key: value'")
        if key in fields:
            raise NoteError(f"{where}: '{key}' given twice")
        fields[key] = _values(value, where)
    missing = [f for f in FIELDS if f not in fields]
    if missing:
        raise NoteError(f"{path}: front matter lacks {', '.join(missing)}")
    body = "\n".join(lines[end + 1:]).strip("\n") + "\n"
    first = body.lstrip("\n").split("\n", 1)[0]
    title = first[2:].strip() if first.startswith("# ") else ""
    if not title:
        raise NoteError(f"{path}:{end + 2}: the body starts with a '# Title' line")
    return Note(path, fields["backend"], fields["hardware"], fields["op_class"],
                fields["topic"], title, body)


def note_files(base: Path | None = None) -> list[Path]:
    base = base or root()
    return sorted(p for d in NOTE_DIRS for p in (base / d).glob("**/*.md"))


@functools.lru_cache(maxsize=8)
def _load(base: str) -> tuple[Note, ...]:
    b = Path(base)
    return tuple(parse(p.read_text(encoding="utf-8"), p.relative_to(b).as_posix())
                 for p in note_files(b))


def load(base: Path | str | None = None) -> tuple[Note, ...]:
    """Every note under ``base`` (default: the shipped knowledge), sorted by path."""
    return _load(str(base or root()))


# ---- matching ----------------------------------------------------------------

# Device names as torch, rocminfo or the user spell them -> the tags notes use.
_HARDWARE_TAGS: dict[str, tuple[str, ...]] = {
    "h100": ("h100", "hopper", "sm90", "nvidia", "cuda"),
    "h200": ("h200", "hopper", "sm90", "nvidia", "cuda"),
    "gh200": ("gh200", "h200", "hopper", "sm90", "nvidia", "cuda"),
    "hopper": ("hopper", "sm90", "nvidia", "cuda"),
    "sm90": ("hopper", "sm90", "nvidia", "cuda"),
    "cuda": ("cuda", "nvidia"),
    "nvidia": ("cuda", "nvidia"),
    "mi300x": ("mi300x", "mi300", "cdna3", "gfx942", "amd", "rocm"),
    "mi300a": ("mi300a", "mi300", "cdna3", "gfx942", "amd", "rocm"),
    "mi325x": ("mi325x", "cdna3", "gfx942", "amd", "rocm"),
    "gfx942": ("cdna3", "gfx942", "mi300", "amd", "rocm"),
    "cdna3": ("cdna3", "gfx942", "amd", "rocm"),
    "rocm": ("amd", "rocm"),
    "hip": ("amd", "rocm"),
    "cpu": ("cpu",),
    "x86": ("cpu", "x86-64"),
    "x86-64": ("cpu", "x86-64"),
    "x86_64": ("cpu", "x86-64"),
    "amd64": ("cpu", "x86-64"),
    "avx2": ("cpu", "x86-64", "avx2"),
    "avx512": ("cpu", "x86-64", "avx512"),
}


def hardware_tags(name: str) -> frozenset[str]:
    """The tags a device name stands for: 'NVIDIA H200' -> {h200, hopper, sm90, nvidia, cuda}."""
    low = name.strip().lower()
    if not low:
        return frozenset()
    words = set(re.split(r"[\s,/()]+", low)) | {low}
    words |= {w.replace("_", "-") for w in words} | {w.replace("sm_", "sm") for w in words}
    tags = {low}
    for w in words:
        tags.update(_HARDWARE_TAGS.get(w, ()))
    return frozenset(tags)


def _wanted(backend: str, hardware: str, op_class: str) -> tuple[set[str], ...]:
    """The tags asked for per field; an empty set (value '' or 'any') filters nothing."""
    def one(v: str) -> set[str]:
        v = (v or "").strip().lower()
        return set() if v in ("", ANY) else {v}
    hw = set() if (hardware or "").strip().lower() == ANY else set(hardware_tags(hardware or ""))
    return one(backend), hw, one(op_class)


def matches(note: Note, backend: str, hardware: str, op_class: str) -> bool:
    """True when each field is 'any' or names the value; a value '' or 'any' filters nothing."""
    fields = (note.backend, note.hardware, note.op_class)
    return all(not want or ANY in values or bool(want.intersection(values))
               for values, want in zip(fields, _wanted(backend, hardware, op_class)))


def specificity(note: Note, backend: str, hardware: str, op_class: str) -> int:
    """How many of the three fields name the value explicitly (not through 'any')."""
    fields = (note.backend, note.hardware, note.op_class)
    return sum(bool(want.intersection(values))
               for values, want in zip(fields, _wanted(backend, hardware, op_class)))
