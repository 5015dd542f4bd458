"""Spec fuzzing: mutants of the library's specs through the path ``kdsl check FILE`` takes.

Every bad spec must end in exit code 2 with ``FILE:LINE:COL: error: ...``, never a Python
traceback, and any input must be accepted or rejected in under 2 s. Each mutant is one of
the library's specs (``specs/*.kspec``, ``specs/kernelbench/level1/*.kspec``) with one to
three mutations drawn from ``MUTATORS``; mutant N of a seed is always the same input.

For each mutant: the front end (``spec.load``: read, parse, assemble, check) is timed on
its own, since accepting or rejecting a spec is what the 2 s target is about; then
``kdsl.cli.main(["check", FILE])`` runs in this process, as the command does (for an
accepted spec that includes the baseline-agreement cases). An exception escaping either
is a traceback (the command would exit 1); so is an exit code other than 0 or 2.

    python bench/spec_fuzz.py --mutants 2000 --seed 0 --out DIR

writes ``DIR/spec_fuzz.json`` (the summary and one record per mutant) and, under
``DIR/inputs/``, each input that gave a traceback or took longer than the target.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 2.0  # the most the front end may take to accept or reject one input
HANG_S = 60.0  # an input still running after this is stopped and counted as a hang
MB = 1 << 20


def library() -> dict[str, str]:
    """The specs mutated: name -> text."""
    paths = sorted((ROOT / "specs").glob("*.kspec")) + \
        sorted((ROOT / "specs" / "kernelbench" / "level1").glob("*.kspec"))
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


# ---- mutations: each takes (rng, text, corpus) and returns the mutated bytes ----------

TOKEN_RE = re.compile(r"\s+|[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\*\*|//|"
                      r"\.\.|<=|>=|==|!=|.", re.S)
VOCABULARY = ["op", "dims", "in", "out", "like", "pad", "baseline", "tolerance", "exact", "test",
              "bench", "where", "cpu:", "cuda:", "f32", "i64", "bf16", "f16", "i32", "bool",
              "offsets", "positive", "sum", "max", "min", "prod", "mean", "argmax", "topk",
              "argtopk", "sort", "argsort", "cumsum", "cumprod", "exp", "log", "where",
              "segment_of", "i64", "x", "y", "i", "j", "k", "b", "M", "N", "K", "B", "0", "1",
              "-1", "2.5", "1e-5", "inf", "(", ")", "[", "]", ",", ":", "=", "..", "+", "-",
              "*", "/", "//", "%", "**", "<", "==", "and", "or", "not", "|", "#", "\n", "\n  ",
              " ", "\\\n", "\t", "\r\n", "dtype", "rtol", "atol"]
HUGE = ["9" * 400, "1" + "0" * 5000, "2**70", "2**64**64", "((2**64)**64)**64",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e400", "1e-400",
        "0", "-1", "1" + "_0" * 30, "4194305", "134217729", "0.0"]
UNICODE = ["\u00e9", "\u200b", "\u202e", "\ufeff", "\U0001f600", "\u0301", "\u2028", "\u00a0",
           "\u2212", "\uff08", "\u0391", "\x0b", "\x0c", "\x1b", "\x7f"]
INVALID_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]


def _tokens(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def _pick_span(rng: random.Random, pieces: list[str]) -> int:
    """A piece that is not whitespace, where there is one."""
    for _ in range(8):
        p = rng.randrange(len(pieces))
        if pieces[p].strip():
            return p
    return rng.randrange(len(pieces))


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True) or [""]


def _log_count(rng: random.Random, most: int) -> int:
    """A count drawn log-uniformly in 1 .. most: small and huge both appear."""
    return max(1, int(2 ** rng.uniform(0, most.bit_length())))


def char_flip(rng, text, corpus):
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 4)):
        p = rng.randrange(len(data))
        data[p] = rng.randrange(256) if rng.random() < 0.3 else data[p] ^ (1 << rng.randrange(7))
    return bytes(data)


def char_delete(rng, text, corpus):
    p = rng.randrange(len(text))
    return (text[:p] + text[p + rng.randint(1, 3):]).encode()


def char_insert(rng, text, corpus):
    p = rng.randrange(len(text) + 1)
    ch = rng.choice("()[],.:=+-*/%<>|#$@!?'\"\\{}~`;^&0123456789_ \t\r\nabcxyzMN")
    return (text[:p] + ch * rng.choice((1, 1, 2, 3)) + text[p:]).encode()


def token_delete(rng, text, corpus):
    pieces = _tokens(text)
    del pieces[_pick_span(rng, pieces)]
    return "".join(pieces).encode()


def token_duplicate(rng, text, corpus):
    pieces = _tokens(text)
    p = _pick_span(rng, pieces)
    pieces.insert(p, pieces[p])
    return "".join(pieces).encode()


def token_swap(rng, text, corpus):
    pieces = _tokens(text)
    p, q = _pick_span(rng, pieces), _pick_span(rng, pieces)
    if rng.random() < 0.5:  # neighbours, mostly
        q = min(p + 2, len(pieces) - 1)
    pieces[p], pieces[q] = pieces[q], pieces[p]
    return "".join(pieces).encode()


def token_replace(rng, text, corpus):
    pieces = _tokens(text)
    pieces[_pick_span(rng, pieces)] = rng.choice(VOCABULARY)
    return "".join(pieces).encode()


def huge_number(rng, text, corpus):
    """A number, or any token, replaced by one at or past the limits."""
    pieces = _tokens(text)
    numbers = [i for i, t in enumerate(pieces) if t[:1].isdigit()]
    p = rng.choice(numbers) if numbers and rng.random() < 0.8 else _pick_span(rng, pieces)
    pieces[p] = rng.choice(HUGE)
    return "".join(pieces).encode()


def index_arithmetic(rng, text, corpus):
    """Huge or odd arithmetic added to a subscript: ``x[i + 2**70]``."""
    spots = [m.end() - 1 for m in re.finditer(r"\w\[[^\]\n]*\]", text)]
    if not spots:
        return huge_number(rng, text, corpus)
    p = rng.choice(spots)
    extra = rng.choice([" + 2**70", " - 2**70", " + 9223372036854775807", " * 2**64", " + 1",
                        " - 1", " ** 64", " // 0", " % 0", " + 1180591620717411303424",
                        " + (2**64)**64", " * -1"])
    return (text[:p] + extra + text[p:]).encode()


def deep_nesting(rng, text, corpus):
    """An expression wrapped in many parentheses, brackets, minus signs or nots, or a long
    chain of one operator."""
    lines = _lines(text)
    k = rng.randrange(len(lines))
    line = lines[k]
    eq = line.find("= ")
    p = eq + 2 if eq >= 0 else len(line) // 2
    n = _log_count(rng, 20_000)
    kind = rng.choice(["(", "[", "-", "not ", "chain", "pow"])
    if kind == "(":
        body = "(" * n + line[p:].rstrip("\n") + ")" * n + "\n"
    elif kind == "[":
        body = "x[" * n + "i" + "]" * n + "\n"
    elif kind == "chain":
        body = " + ".join(["x[i, j]"] * n) + "\n"
    elif kind == "pow":
        body = "x ** " * n + "2\n"
    else:
        body = kind * n + line[p:]
    lines[k] = line[:p] + body
    return "".join(lines).encode()


def long_repetition(rng, text, corpus):
    """A line, a token or the whole spec repeated, up to about 1 MB."""
    what = rng.choice(["line", "token", "spec", "item"])
    lines = _lines(text)
    if what == "spec":
        return (text * _log_count(rng, MB // max(len(text), 1))).encode()
    if what == "token":
        pieces = _tokens(text)
        p = _pick_span(rng, pieces)
        sep = rng.choice(["", " ", ", ", " | ", " + "])
        pieces[p] = sep.join([pieces[p]] * _log_count(rng, MB // max(len(pieces[p]) + 2, 1)))
        return "".join(pieces).encode()
    k = rng.randrange(len(lines))
    line = lines[k]
    if what == "item" and "," in line:  # a list item repeated: dims, ranges, bench sizes
        head, _, rest = line.partition(",")
        items = rest.rstrip("\n")
        lines[k] = head + ("," + items.split(",")[0]) * _log_count(rng, MB // 8) + items + "\n"
    else:
        lines[k] = line * _log_count(rng, MB // max(len(line), 1))
    return "".join(lines).encode()


def splice_line(rng, text, corpus):
    """A line from another spec inserted, or put in place of one."""
    other = _lines(corpus[rng.choice(sorted(corpus))])
    lines = _lines(text)
    k = rng.randrange(len(lines) + 1)
    new = rng.choice(other)
    if rng.random() < 0.5 and k < len(lines):
        lines[k] = new
    else:
        lines.insert(k, new)
    return "".join(lines).encode()


def splice_specs(rng, text, corpus):
    """Two specs joined, the second cut anywhere."""
    other = corpus[rng.choice(sorted(corpus))]
    return (text + other[:rng.randrange(len(other) + 1)]).encode()


def line_shuffle(rng, text, corpus):
    lines = _lines(text)
    how = rng.choice(["delete", "duplicate", "swap", "move"])
    k, m = rng.randrange(len(lines)), rng.randrange(len(lines))
    if how == "delete":
        del lines[k]
    elif how == "duplicate":
        lines.insert(k, lines[k])
    elif how == "swap":
        lines[k], lines[m] = lines[m], lines[k]
    else:
        lines.insert(m, lines.pop(k))
    return "".join(lines).encode()


def unicode_chars(rng, text, corpus):
    """Non-ASCII characters, valid or not as UTF-8, in names, numbers or whitespace."""
    data = text.encode()
    p = rng.randrange(len(data) + 1)
    while p < len(data) and data[p] & 0xC0 == 0x80:  # not inside a character
        p += 1
    if rng.random() < 0.3:
        insert = rng.choice(INVALID_UTF8)
    else:
        insert = "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 3))).encode()
    return data[:p] + insert + data[p:]


def nul_and_empty(rng, text, corpus):
    """Empty files, NUL bytes, a truncated spec, a byte-order mark, odd line ends."""
    data = text.encode()
    how = rng.choice(["empty", "nul", "nuls", "truncate", "bom", "crlf", "cr", "no-newline",
                      "only-whitespace"])
    if how == "empty":
        return b""
    if how == "nul":
        p = rng.randrange(len(data) + 1)
        return data[:p] + b"\x00" + data[p:]
    if how == "nuls":
        return b"\x00" * _log_count(rng, 4096)
    if how == "truncate":
        return data[:rng.randrange(len(data) + 1)]
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    if how == "crlf":
        return data.replace(b"\n", b"\r\n")
    if how == "cr":
        return data.replace(b"\n", b"\r")
    if how == "no-newline":
        return data.rstrip(b"\n")
    return b" \t\n" * rng.randint(1, 100)


def operator_swap(rng, text, corpus):
    """One operator or bracket traded for another: the structure shifts, the tokens stay."""
    ops = [m for m in re.finditer(r"\*\*|//|\.\.|[-+*/%<>=|,:\[\]()]", text)]
    if not ops:
        return token_replace(rng, text, corpus)
    m = rng.choice(ops)
    new = rng.choice(["+", "-", "*", "/", "//", "%", "**", "..", "<", "==", ",", ":", "=", "|",
                      "[", "]", "(", ")", ""])
    return (text[:m.start()] + new + text[m.end():]).encode()


def number_tweak(rng, text, corpus):
    """A number moved to an edge: 0, 1, negative, off by one, a float for an integer."""
    ms = list(re.finditer(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text))
    if not ms:
        return huge_number(rng, text, corpus)
    m = rng.choice(ms)
    v = m.group()
    new = rng.choice(["0", "1", "-" + v, v + "0", v + ".5", str(int(float(v)) + 1)
                      if float(v) < 1e18 else "1", "-0", "1e308", "4194304", "4194305"])
    return (text[:m.start()] + new + text[m.end():]).encode()


def rename(rng, text, corpus):
    """Every use of one name changed, or a single use: unknown names, shadowing, clashes."""
    names = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", text)))
    if not names:
        return token_replace(rng, text, corpus)
    old = rng.choice(names)
    new = rng.choice(names + ["q", "i", "j", "M", "N", "x", "sum", "where", "in", "op", "_"])
    if rng.random() < 0.5:
        return re.sub(rf"\b{re.escape(old)}\b", new, text).encode()
    ms = list(re.finditer(rf"\b{re.escape(old)}\b", text))
    m = rng.choice(ms)
    return (text[:m.start()] + new + text[m.end():]).encode()


MUTATORS: dict[str, Callable] = {
    "char_flip": char_flip, "char_delete": char_delete, "char_insert": char_insert,
    "token_delete": token_delete, "token_duplicate": token_duplicate, "token_swap": token_swap,
    "token_replace": token_replace, "huge_number": huge_number,
    "index_arithmetic": index_arithmetic, "deep_nesting": deep_nesting,
    "long_repetition": long_repetition, "splice_line": splice_line,
    "splice_specs": splice_specs, "line_shuffle": line_shuffle, "unicode": unicode_chars,
    "nul_and_empty": nul_and_empty, "operator_swap": operator_swap,
    "number_tweak": number_tweak, "rename": rename,
}


def mutant(seed: int, n: int, corpus: dict[str, str]) -> tuple[str, list[str], bytes]:
    """Mutant ``n`` of ``seed``: (source spec, mutations applied, bytes)."""
    rng = random.Random(f"{seed}:{n}")
    source = rng.choice(sorted(corpus))
    data = corpus[source].encode()
    applied = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        name = rng.choice(sorted(MUTATORS))
        text = data.decode("utf-8", "replace")  # a mutation after a byte-level one sees text
        data = MUTATORS[name](rng, text or " ", corpus) if text else MUTATORS[name](rng, " ",
                                                                                    corpus)
        applied.append(name)
        if len(data) > 2 * MB:  # keep the fuzzer's own memory and time sane
            data = data[:2 * MB]
    return source, applied, data


# ---- running one input the way ``kdsl check`` does ----------------------------------

class _Hang(BaseException):
    """Raised by the alarm; a BaseException so that no handler in kdsl swallows it."""


@dataclass
class Record:
    n: int
    source: str
    mutations: list[str]
    bytes: int
    outcome: str = ""  # accepted | rejected | traceback | hang
    exit_code: int | None = None
    front_s: float = 0.0  # spec.load: read, parse, assemble, check
    check_s: float = 0.0  # kdsl check FILE in full (baseline agreement included)
    message: str = ""  # the first line of the error, or the traceback's last
    trace: str = field(default="", repr=False)


def _alarm(seconds: float):
    def fire(signum, frame):
        raise _Hang()
    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def run_one(path: Path, record: Record, cases: int, agreement: bool) -> Record:
    from kdsl import cli, spec
    from kdsl.errors import SpecError
    t0 = time.perf_counter()
    accepted = False
    try:
        _alarm(HANG_S)
        try:
            spec.load(path)
            accepted = True
        finally:
            _disarm()
    except SpecError as e:
        record.message = e.render().splitlines()[0][:300]
    except _Hang:
        record.outcome, record.front_s = "hang", time.perf_counter() - t0
        return record
    except Exception as e:  # noqa: BLE001 - the point: anything else is a traceback
        record.outcome, record.front_s = "traceback", time.perf_counter() - t0
        record.message, record.trace = f"{type(e).__name__}: {e}"[:300], traceback.format_exc()
        return record
    record.front_s = time.perf_counter() - t0
    if accepted and not agreement:
        record.outcome, record.exit_code = "accepted", None
        return record
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        _alarm(HANG_S)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(["check", "--cases", str(cases), str(path)])
        finally:
            _disarm()
    except _Hang:
        record.outcome, record.check_s = "hang", time.perf_counter() - t0
        return record
    except BaseException as e:  # noqa: BLE001 - SystemExit included: the CLI returns codes
        record.outcome, record.check_s = "traceback", time.perf_counter() - t0
        record.message, record.trace = f"{type(e).__name__}: {e}"[:300], traceback.format_exc()
        return record
    record.check_s = time.perf_counter() - t0
    record.exit_code = rc
    if rc not in (0, 2):
        record.outcome, record.message = "traceback", f"exit code {rc}"
    elif accepted:
        record.outcome = "accepted"
        if rc == 2:  # the spec parses and checks, but its baseline disagrees
            record.message = err.getvalue().splitlines()[0][:300] if err.getvalue() else ""
    else:
        record.outcome = "rejected"
        first = err.getvalue().splitlines()[0] if err.getvalue() else ""
        if rc != 2 or not re.match(r"^.+:\d+:\d+: error: \S", first):
            record.outcome, record.message = "traceback", f"rejected without FILE:LINE:COL " \
                                                          f"(exit {rc}): {first[:200]}"
    return record


def fuzz(mutants: int, seed: int, cases: int = 1, agreement: bool = True,
         keep: Path | None = None, progress: Callable[[Record], None] | None = None) \
        -> list[Record]:
    """Run ``mutants`` mutants of ``seed``; inputs that fail or are slow are copied to
    ``keep`` when given."""
    corpus = library()
    records = []
    with tempfile.TemporaryDirectory(prefix="spec_fuzz_") as tmp:
        path = Path(tmp) / "mutant.kspec"
        for n in range(mutants):
            source, applied, data = mutant(seed, n, corpus)
            path.write_bytes(data)
            r = run_one(path, Record(n, source, applied, len(data)), cases, agreement)
            records.append(r)
            if keep is not None and (r.outcome in ("traceback", "hang") or r.front_s > TARGET_S):
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{seed}-{n}.kspec").write_bytes(data)
            if progress is not None:
                progress(r)
    return records


def summary(records: list[Record], top: int = 10) -> dict:
    by = lambda key: sorted(records, key=key, reverse=True)[:top]  # noqa: E731
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    mutations: dict[str, int] = {}
    for r in records:
        for m in r.mutations:
            mutations[m] = mutations.get(m, 0) + 1
    slim = lambda r: {k: v for k, v in asdict(r).items() if k != "trace"}  # noqa: E731
    return {
        "count": len(records),
        "outcomes": outcomes,
        "tracebacks": sum(r.outcome in ("traceback", "hang") for r in records),
        "over_target": sum(r.front_s > TARGET_S for r in records),
        "target_s": TARGET_S,
        "max_front_s": max((r.front_s for r in records), default=0.0),
        "max_check_s": max((r.check_s for r in records), default=0.0),
        "max_bytes": max((r.bytes for r in records), default=0),
        "mutations": dict(sorted(mutations.items())),
        "slowest_front": [slim(r) for r in by(lambda r: r.front_s)],
        "slowest_check": [slim(r) for r in by(lambda r: r.check_s)],
        "failures": [asdict(r) for r in records if r.outcome in ("traceback", "hang")],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="spec_fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--mutants", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="directory for spec_fuzz.json and inputs/")
    p.add_argument("--cases", type=int, default=1, help="kdsl check --cases, per dtype")
    p.add_argument("--front-only", action="store_true",
                   help="stop after spec.load (no baseline agreement for accepted specs)")
    p.add_argument("--only", type=int, help="run mutant N of the seed alone, and keep it")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from kdsl import cli  # warm: torch and the reference imported before any timing
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["check", "--cases", "1", str(ROOT / "specs" / "softmax.kspec")])

    started = time.time()
    if args.only is not None:
        corpus = library()
        source, applied, data = mutant(args.seed, args.only, corpus)
        (out / "inputs").mkdir(exist_ok=True)
        path = out / "inputs" / f"{args.seed}-{args.only}.kspec"
        path.write_bytes(data)
        r = run_one(path, Record(args.only, source, applied, len(data)), args.cases,
                    not args.front_only)
        print(json.dumps(asdict(r), indent=1))
        return 0

    def progress(r: Record) -> None:
        if r.outcome in ("traceback", "hang") or r.front_s > TARGET_S:
            print(f"  #{r.n} {r.outcome} front {r.front_s:.2f}s ({r.source}, "
                  f"{'+'.join(r.mutations)}): {r.message[:120]}", flush=True)
        elif (r.n + 1) % 200 == 0:
            print(f"  {r.n + 1} mutants...", flush=True)

    records = fuzz(args.mutants, args.seed, args.cases, not args.front_only, out / "inputs",
                   progress)
    s = summary(records)
    s.update({"command": " ".join(["python", "bench/spec_fuzz.py", *sys.argv[1:]]),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "seconds": round(time.time() - started, 1), "seed": args.seed,
              "machine": f"{platform.node()} {platform.machine()} "
                         f"{platform.python_version()}"})
    (out / "spec_fuzz.json").write_text(json.dumps(
        {**s, "records": [{k: v for k, v in asdict(r).items() if k != "trace"}
                          for r in records]}, indent=1))
    print(f"spec fuzz: {s['count']} mutants (seed {args.seed}) in {s['seconds']} s: "
          f"{s['outcomes']}")
    print(f"  tracebacks {s['tracebacks']} (target 0); front end max {s['max_front_s']:.2f} s, "
          f"{s['over_target']} over {TARGET_S:g} s; kdsl check max {s['max_check_s']:.2f} s")
    print("  slowest front ends:")
    for r in s["slowest_front"][:5]:
        print(f"    #{r['n']} {r['front_s']:.2f}s {r['bytes']:,} B {r['outcome']} "
              f"({r['source']}, {'+'.join(r['mutations'])})")
    print(f"  written {out / 'spec_fuzz.json'}")
    return 1 if s["tracebacks"] or s["over_target"] else 0


if __name__ == "__main__":
    sys.exit(main())
