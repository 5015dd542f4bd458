"""Names in the spec: inputs, dims and outputs that the language and the baseline accept."""
from __future__ import annotations

import keyword
import re

from ..builtins import CASTS, CONSTANTS, ELEMENTWISE, INDEX_BUILTINS

RESERVED = ({"op", "dims", "in", "out", "like", "pad", "where", "and", "or", "not", "baseline",
             "tolerance", "exact", "test", "bench", "sum", "mean", "max", "min", "prod",
             "argmax", "argmin", "cumsum", "cumprod", "sort", "topk", "torch", "F", "math", "kt"}
            | set(ELEMENTWISE) | set(CASTS) | set(CONSTANTS) | set(INDEX_BUILTINS)
            | set(keyword.kwlist))
# index names the emitter uses inside statements (i0, k3, r12, c5)
_INDEX = re.compile(r"^[ikrc]\d+$")


def clean(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "t"
    if name[0].isdigit():
        name = f"t{name}"
    return name


class Names:
    def __init__(self):
        self.taken: set[str] = set()

    def claim(self, wanted: str) -> str:
        base = clean(wanted)
        name, n = base, 1
        while name in self.taken or name in RESERVED or _INDEX.match(name) or \
                name.startswith("_v"):
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name
