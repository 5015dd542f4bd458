"""What a diagnosis changes in the search: the genes tried first, the words notes are
retrieved by, and the text an LLM prompt shows.

The genes each bound points at are data (``FIRST_GENES``): a gene whose name starts
with one of the words is tried first by the rule-based mutations, ``FIRST_SHARE`` of the
time (the rest of the time any gene, so a wrong diagnosis costs a little and never
traps the search). Latency-bound kernels want more warps in flight or more loads in
flight per warp: warps, pipelining stages and block sizes (on the CPU: threads, unroll,
schedule). Memory-bound ones want fewer, wider, better-cached accesses: tiles, vector
widths, eviction. Compute-bound ones want the faster instruction path: tensor-core
precision, the copy engine, the register tile.
"""
from __future__ import annotations

import random

FIRST_GENES: dict[str, tuple[str, ...]] = {
    "latency": ("num_warps", "num_stages", "BLOCK", "threads", "unroll", "schedule"),
    "memory": ("BLOCK", "vec", "simdlen", "evict", "tile", "reduce"),
    "compute": ("F32_DOT", "TMA", "BLOCK_K", "mr", "nr", "kc", "acc", "exp"),
}
FIRST_SHARE = 0.75

# words a bound adds to the query that ranks knowledge notes (BM25 over notes' text)
WORDS: dict[str, str] = {
    "latency": "latency-bound occupancy eligible warps stalls num_warps num_stages "
               "pipelining registers loads in flight",
    "memory": "memory-bound bandwidth coalesced vectorized loads traffic passes fusion "
              "roofline floor",
    "compute": "compute-bound tensor cores tl.dot FMA pipe instructions precision tf32",
}
BEST = "best"  # ctx.diagnoses key of the run's best kernel's diagnosis


def first_genes(diagnosis: dict | None, names: list[str]) -> list[str]:
    """Of ``names``, those the diagnosis's bound points at, in the order given."""
    words = FIRST_GENES.get((diagnosis or {}).get("bound", ""), ())
    return [n for n in names if any(n.startswith(w) for w in words)]


def ordered(diagnosis: dict | None, names: list[str], rng: random.Random) -> list[str]:
    """``names`` shuffled, the diagnosis's first genes ahead of the rest."""
    first = first_genes(diagnosis, names)
    rest = [n for n in names if n not in first]
    rng.shuffle(first)
    rng.shuffle(rest)
    return first + rest


def pick(diagnosis: dict | None, names: list[str], count: int,
         rng: random.Random) -> list[str] | None:
    """``count`` genes to change, the first genes preferred; None without a preference
    (the caller draws as it always did, so runs without profiles are unchanged)."""
    first = first_genes(diagnosis, names)
    if not first:
        return None
    if rng.random() >= FIRST_SHARE:
        return rng.sample(names, min(count, len(names)))
    return ordered(diagnosis, names, rng)[:count]


def diagnosis_for(ctx, candidate) -> dict | None:
    """The candidate's own diagnosis, else the run's best kernel's (what the search is
    improving on), else None."""
    diagnoses = getattr(ctx, "diagnoses", None) or {}
    return diagnoses.get(ctx.key(candidate)) or diagnoses.get(BEST)


def words(diagnosis: dict | None) -> str:
    if not diagnosis:
        return ""
    stalls = " ".join(s[0] for s in diagnosis.get("stalls") or ())
    return f"{WORDS.get(diagnosis.get('bound', ''), '')} {stalls}".strip()


def prompt_text(diagnosis: dict | None) -> str:
    """What the rewrite and repair prompts show of a profile."""
    if not diagnosis:
        return "(not profiled)"
    lines = [diagnosis.get("line") or diagnosis.get("bound", "?")]
    hint = {"latency": "Neither memory nor compute is busy: get more work in flight (more "
                       "warps or stages, more independent loads per thread, a grid that "
                       "fills the GPU) before reducing work.",
            "memory": "The memory side is the limit: move fewer bytes (fuse passes, avoid "
                      "re-reads, keep intermediates on chip) or move them more efficiently "
                      "(wider, coalesced accesses).",
            "compute": "The compute side is the limit: use a faster instruction path "
                       "(tensor cores via tl.dot, lower-precision inputs with fp32 "
                       "accumulation) or do fewer operations."}.get(diagnosis.get("bound"))
    if hint:
        lines.append(hint)
    sol = diagnosis.get("sol")
    if isinstance(sol, (int, float)) and sol >= 0.9:
        lines.append("At 90% of speed-of-light or more, little is left to gain on this path.")
    return "\n".join(lines)
