"""Text -> IR: the lark parser and the one Transformer that builds the IR.

This stage knows syntax only; meaning is checked in ``checker.py``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import lark
from lark import Lark, Token, Transformer, v_args

from . import ir, split_index
from .builtins import ELEMENTWISE
from .errors import Diagnostic, SpecError

REDUCTIONS = ("sum", "max", "min", "prod", "mean", "argmax", "argmin")
SCANS = ("cumsum", "cumprod")
CONSTANT_AT = "kd_at"  # the index a constant 0 on the left side becomes (``statement``)
COLLECTIVES = ("sort", "argsort", "topk", "argtopk")
ARITHMETIC = ("+", "-", "*", "/", "//", "%", "**")  # what a negated body is looked for under
MAX_NESTING = 64
MAX_DEPTH = 200  # levels of the parse tree; the stages after parsing recurse per level
# The library's largest spec is 2.4 KB; a limit far above that keeps every pass over a
# spec (parsing, checking, sampling sizes) well under a second on the largest input.
MAX_SPEC_BYTES = 32 * 1024
INT_LIMIT = 1 << 63  # integers in a spec are 64-bit (sizes, indices, i64 values)

_TOKEN_NAMES = {
    "_NL": "end of line", "NAME": "a name", "INT": "an integer", "FLOAT": "a number",
    "LSQB": "'['", "RSQB": "']'", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
    "COLON": "':'", "EQUAL": "'='", "VBAR": "'|'", "$END": "end of file",
    "COMPARE": "a comparison", "ADD_OP": "'+' or '-'", "MUL_OP": "'*', '/', '//' or '%'",
    "MINUS": "'-'", "POW": "'**'", "BASELINE_TEXT": "a torch expression", "__ANON_0": "'..'",
}


@lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = resources.files("kdsl").joinpath("kspec.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True)


def _loc(meta_or_token) -> ir.Loc:
    line = getattr(meta_or_token, "line", None)
    col = getattr(meta_or_token, "column", None)
    if line is None:
        return ir.NO_LOC
    return ir.Loc(line, col)


@dataclass(frozen=True)
class _Bodiless(ir.Call):
    """``sum(j)`` with no body yet. In ``sum(j) -x[i, j]`` the grammar reads the minus as a
    subtraction from a call (the same tokens are ``f(a) - b``), so ``binary`` makes the
    reduction of ``-x[i, j]`` from it; one left anywhere else is an error (``statement``)."""


class _Invalid(Exception):
    def __init__(self, loc: ir.Loc, message: str):
        self.loc, self.message = loc, message


@v_args(meta=True)
class _ToIR(Transformer):
    """One method per grammar rule alias; each returns IR nodes."""

    def start(self, meta, ops):
        return tuple(ops)

    # ---- expressions ----
    def int_literal(self, meta, c):
        digits = str(c[0]).replace("_", "").lstrip("0") or "0"
        # the length first: int() of thousands of digits is slow, and refused past 4300
        if len(digits) > 19 or int(digits) >= INT_LIMIT:
            raise _Invalid(_loc(c[0]), f"integer {_shorten(digits)} is too large; integers "
                                       f"in a spec are 64-bit (below 2**63)")
        return ir.Num(int(digits), _loc(c[0]))

    def float_literal(self, meta, c):
        value = float(str(c[0]).replace("_", ""))
        if not math.isfinite(value):
            raise _Invalid(_loc(c[0]), f"number {_shorten(str(c[0]))} is too large for a "
                                       f"float (at most about 1.8e308)")
        return ir.Num(value, _loc(c[0]))

    def name(self, meta, c):
        return ir.Name(str(c[0]), _loc(c[0]))

    def access(self, meta, c):
        name, *rest = c
        pad = rest[-1]
        subs = tuple(x for x in rest[:-1] if x is not None)
        return ir.Access(str(name), subs, pad, _loc(name))

    def neg(self, meta, c):
        if isinstance(c[0], ir.Num):
            return ir.Num(-c[0].value, _loc(meta))
        return ir.Unary("neg", c[0], _loc(meta))

    def not_(self, meta, c):
        return ir.Unary("not", c[0], _loc(meta))

    def binary(self, meta, c):
        if str(c[1]) == "-":
            negated = self._negated_body(c[0], ir.Unary("neg", c[2], _loc(c[1])))
            if negated is not None:
                return negated
        return ir.Binary(str(c[1]), c[0], c[2], _loc(c[1]))

    def _negated_body(self, left, body):
        """``left - x`` where ``left`` ends in a reduction with no body yet (``sum(j) -x``,
        ``a * sum(j) -x``): that reduction of ``body`` (``-x``, extending over a product as
        any body does), in its place; None where ``left`` ends otherwise."""
        if isinstance(left, _Bodiless) or (
                isinstance(left, ir.Call) and left.fn in REDUCTIONS and len(left.args) == 1
                and isinstance(left.args[0], ir.Name)):  # max(j) alone: no elementwise max
            return self._bound_form(left.fn, left.loc, left.args, body)
        if isinstance(left, ir.Binary) and left.op in ARITHMETIC:
            right = self._negated_body(left.right, body)
            return None if right is None else ir.Binary(left.op, left.left, right, left.loc)
        return None

    def compare(self, meta, c):
        return ir.Binary(str(c[1]), c[0], c[2], _loc(c[1]))

    def pow_(self, meta, c):
        return ir.Binary("**", c[0], c[2], _loc(meta))

    def and_(self, meta, c):
        return ir.Binary("and", c[0], c[1], _loc(meta))

    def or_(self, meta, c):
        return ir.Binary("or", c[0], c[1], _loc(meta))

    def ranged_index(self, meta, c):
        return ir.IndexRange(str(c[0]), c[1], c[2], _loc(c[0]))

    def call(self, meta, c):
        fn_tok, *rest = c
        fn, loc = str(fn_tok), _loc(fn_tok)
        args = tuple(a for a in rest if a is not None)
        if fn in REDUCTIONS + SCANS + COLLECTIVES and fn not in ELEMENTWISE:
            return _Bodiless(fn, args, loc)
        for a in args:
            if isinstance(a, ir.IndexRange):
                raise _Invalid(a.loc, f"'{a.name} in ..' ranges belong to a reduction, "
                                      f"but '{fn}(...)' has no body after it")
        return ir.Call(fn, args, loc)

    def reduction(self, meta, c):
        fn_tok, *rest = c
        fn, loc = str(fn_tok), _loc(fn_tok)
        args = tuple(a for a in rest[:-1] if a is not None)
        return self._bound_form(fn, loc, args, rest[-1])

    def _bound_form(self, fn, loc, args, body):
        def as_index(a) -> ir.IndexRange:
            if isinstance(a, ir.IndexRange):
                return a
            if isinstance(a, ir.Name):
                return ir.IndexRange(a.name, None, None, a.loc)
            raise _Invalid(getattr(a, "loc", loc),
                           f"'{fn}(...)' takes index names here, like {fn}(j)")

        if fn in REDUCTIONS:
            if not args:
                raise _Invalid(loc, f"'{fn}()' needs the indices to reduce over, like {fn}(j)")
            return ir.Reduce(fn, tuple(as_index(a) for a in args), body, loc)
        if fn in SCANS:
            if len(args) != 1 or not isinstance(args[0], ir.Name):
                raise _Invalid(loc, f"'{fn}' scans one output index, like {fn}(j) x[i, j]")
            return ir.Scan(fn, args[0].name, body, loc)
        if fn in COLLECTIVES:
            wants_k = fn in ("topk", "argtopk")
            if len(args) != (2 if wants_k else 1):
                form = f"{fn}(j, K)" if wants_k else f"{fn}(j)"
                raise _Invalid(loc, f"'{fn}' is written {form} followed by its body")
            return ir.Collective(fn, as_index(args[0]), args[1] if wants_k else None, body, loc)
        raise _Invalid(loc, f"'{fn}' is not a reduction, scan or collective; "
                            f"known: {', '.join(REDUCTIONS + SCANS + COLLECTIVES)}")

    # ---- declarations ----
    def dims_decl(self, meta, c):
        return ("dims", [(str(t), _loc(t)) for t in c])

    def dtype_set(self, meta, c):
        return ("set", tuple(str(t) for t in c), [_loc(t) for t in c])

    def dtype_like(self, meta, c):
        return ("like", str(c[0]), [_loc(c[0])])

    def shape(self, meta, c):
        return tuple(x for x in c if x is not None)

    def range_domain(self, meta, c):
        return ir.ValueRange(c[0], c[1])

    def named_domain(self, meta, c):
        name, arg = str(c[0]), c[1]
        if name == "offsets":
            if arg is None:
                raise _Invalid(_loc(c[0]), "offsets need their total length, like offsets(N)")
            return ir.Offsets(arg)
        if name == "positive":
            if arg is not None:
                raise _Invalid(_loc(c[0]), "'positive' takes no argument")
            return ir.Positive()
        raise _Invalid(_loc(c[0]), f"unknown input domain '{name}'; "
                                   "known: in LO..HI, offsets(N), positive")

    def _tensor(self, role, c):
        name, dt, shape, *domain = c
        kind, value, _locs = dt
        dtypes = value if kind == "set" else ()
        like = value if kind == "like" else None
        dom = domain[0] if domain else None
        return ("tensor", ir.Tensor(str(name), role, dtypes, like, shape, dom, _loc(name)), _locs)

    def input_decl(self, meta, c):
        return self._tensor("in", c)

    def output_decl(self, meta, c):
        return self._tensor("out", c)

    def statement(self, meta, c):
        target, *rest = c
        value = rest[-1]
        for e in (x for part in rest if isinstance(part, ir.Expr) for x in ir.walk(part)):
            if isinstance(e, _Bodiless):
                raise _Invalid(e.loc, f"'{e.fn}(...)' needs a body after it, like "
                                      f"{e.fn}(j) x[i, j]")
        subs = [s for s in rest[:-1] if s is not None]
        try:  # ``y[n, g * (C // G) + k] = ...``: one index of that axis, g and k read from it
            subs, value = split_index.split(subs, value)
        except split_index.SplitError as e:
            raise _Invalid(e.loc, str(e)) from None
        names, ranges = [], []
        for p, s in enumerate(subs):
            if isinstance(s, ir.Num) and s.value == 0 and isinstance(s.value, int):
                # ``y[i, 0] = ...``: an axis of size 1 written at its one place (a keepdim
                # output, as users write it), an index of the range 0 .. 1 the checker
                # holds to the axis's size
                s = ir.IndexRange(f"{CONSTANT_AT}{p}", ir.Num(0, s.loc), ir.Num(1, s.loc), s.loc)
            if not isinstance(s, (ir.Name, ir.IndexRange)):
                raise _Invalid(getattr(s, "loc", _loc(target)),
                               "the left side is indexed by plain index names, like y[i, j] "
                               "(or 0, on an axis of size 1, or g * A + k, an axis split "
                               "into groups)")
            if s.name in names:
                raise _Invalid(s.loc, f"index '{s.name}' appears twice on the left side")
            names.append(s.name)
            ranges.append(s if isinstance(s, ir.IndexRange) else None)
        declared = tuple(ranges) if any(ranges) else ()
        return ("statement", ir.Statement(str(target), tuple(names), value, _loc(target),
                                          declared))

    def baseline_decl(self, meta, c):
        tok = c[0]
        text = str(tok)
        lead = len(text) - len(text.lstrip())
        return ("baseline", ir.Baseline(text.strip(), ir.Loc(tok.line, tok.column + lead)))

    def tolerance_exact(self, meta, c):
        return ("tolerance", ir.Tolerance(True), _loc(meta))

    def keyword_arg(self, meta, c):
        return (str(c[0]), c[1], _loc(c[0]))

    def tolerance_entry(self, meta, c):
        return (str(c[0]), _loc(c[0]), c[1:])

    def tolerance_table(self, meta, entries):
        table = []
        for dtype, loc, kwargs in entries:
            vals = {}
            for key, value, kloc in kwargs:
                if key not in ("rtol", "atol"):
                    raise _Invalid(kloc, f"unknown tolerance '{key}'; use rtol= and atol=")
                if not isinstance(value, ir.Num):
                    raise _Invalid(kloc, f"'{key}' must be a number")
                if value.value < 0:
                    raise _Invalid(kloc, f"'{key}' must not be negative")
                vals[key] = float(value.value)
            table.append((dtype, vals.get("rtol", 0.0), vals.get("atol", 0.0), loc))
        return ("tolerance", ir.Tolerance(False, tuple(t[:3] for t in table)), _loc(meta),
                [(t[0], t[3]) for t in table])

    def size_range(self, meta, c):
        return ir.SizeRange(str(c[0]), c[1], c[2], _loc(c[0]))

    def condition(self, meta, c):
        return c[0]

    def test_decl(self, meta, c):
        ranges = tuple(x for x in c if isinstance(x, ir.SizeRange))
        conds = tuple(x for x in c if x is not None and not isinstance(x, ir.SizeRange))
        return ("test", ir.TestSizes(ranges, conds), _loc(meta))

    def bench_item(self, meta, c):
        return (str(c[0]), c[1], _loc(c[0]))

    def bench_decl(self, meta, c):
        device, *items = c
        return ("bench", None if device is None else str(device), _loc(device or meta), items)

    def op(self, meta, c):
        name, *items = c
        return ("op", str(name), _loc(name), items)


def _shorten(digits: str) -> str:
    return digits if len(digits) <= 24 else f"{digits[:10]}...{digits[-4:]} ({len(digits)} digits)"


def check_size(data: bytes | str, path: str) -> None:
    """Refuse a spec past ``MAX_SPEC_BYTES``, located where it crosses the limit."""
    if len(data) <= MAX_SPEC_BYTES // 4:  # 4 bytes a character at most
        return
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_SPEC_BYTES:
        return
    prefix = data[:MAX_SPEC_BYTES].decode("utf-8", "ignore")  # a character cut in two: its column
    line = prefix.count("\n") + 1
    col = len(prefix) - (prefix.rfind("\n") + 1) + 1
    shown = data[:MAX_SPEC_BYTES + 400].decode("utf-8", "replace")
    raise SpecError([Diagnostic(path, line, col, f"a spec is at most {MAX_SPEC_BYTES:,} bytes; "
                                                 f"this one goes on past here")], shown)


def check_nesting(text: str, path: str) -> None:
    """Refuse absurd nesting before parsing, so deep input cannot exhaust the stack.

    Brackets never span lines (except after a backslash) and comments hold none, so
    unclosed brackets spread over many lines are left for the parser to report."""
    depth, line, col, comment, prev = 0, 1, 0, False, ""
    for ch in text:
        col += 1
        if ch == "\n":
            if prev != "\\" or comment:
                depth = 0
            line, col, comment = line + 1, 0, False
        elif comment or ch == "\r":
            continue
        elif ch == "#":
            comment = True
        elif ch in "([":
            depth += 1
            if depth > MAX_NESTING:
                raise SpecError([Diagnostic(path, line, col,
                                            f"brackets nested deeper than {MAX_NESTING} levels")],
                                text)
        elif ch in ")]":
            depth = max(depth - 1, 0)
        prev = ch


def check_depth(tree: lark.Tree, path: str, text: str) -> None:
    """Refuse expressions nested so deep (``- - - x``, a long ``x + x + ...``) that the
    recursive stages after parsing would exhaust the stack; iterative, so it cannot itself."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            loc = ir.NO_LOC if node.meta.empty else _loc(node.meta)
            raise SpecError([Diagnostic(path, loc.line, loc.column,
                                        f"expression nested deeper than {MAX_DEPTH} levels")],
                            text)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))


def _describe_expected(expected) -> str:
    names = sorted({_TOKEN_NAMES.get(e, repr(e.lower()) if e.isupper() else e) for e in expected})
    names = [n for n in names if n]
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


def _syntax_error(e: lark.exceptions.LarkError, path: str, text: str) -> SpecError:
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else "?"
        shown = repr(ch) if ch.isprintable() else f"byte {ord(ch):#04x}"
        return SpecError([Diagnostic(path, e.line, e.column, f"unexpected character {shown}")],
                         text)
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            lines = text.splitlines() or [""]
            return SpecError([Diagnostic(path, len(lines), len(lines[-1]) + 1,
                                         f"unexpected end of file; expected "
                                         f"{_describe_expected(e.expected)}")], text)
        text_of = str(tok)
        if tok.type == "BASELINE_TEXT":  # the catch-all terminal lexed the rest of the line
            text_of = re.match(r"\w+|.", text_of, re.S).group()
        if len(text_of) > 40:
            text_of = text_of[:40] + "..."
        shown = "end of line" if tok.type == "_NL" else repr(text_of)
        return SpecError([Diagnostic(path, tok.line, tok.column,
                                     f"unexpected {shown}; expected "
                                     f"{_describe_expected(e.expected)}")], text)
    if isinstance(e, lark.exceptions.UnexpectedEOF):
        lines = text.splitlines() or [""]
        return SpecError([Diagnostic(path, len(lines), len(lines[-1]) + 1,
                                     "unexpected end of file")], text)
    return SpecError([Diagnostic(path, 1, 1, f"cannot parse: {e}")], text)


def decode(data: bytes, path: str) -> str:
    """Bytes -> text, with a located error for anything that is not UTF-8 text."""
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors write
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        prefix = data[:e.start].decode("utf-8", errors="replace")
        line = prefix.count("\n") + 1
        col = len(prefix) - (prefix.rfind("\n") + 1) + 1
        raise SpecError([Diagnostic(path, line, col,
                                    f"not UTF-8 text (byte {data[e.start]:#04x})")],
                        data.decode("utf-8", errors="replace"))
    nul = text.find("\x00")
    if nul >= 0:
        prefix = text[:nul]
        line = prefix.count("\n") + 1
        col = nul - (prefix.rfind("\n") + 1) + 1
        raise SpecError([Diagnostic(path, line, col, "binary data (a NUL byte) in a spec")], text)
    return text


def parse_tree(text: str, path: str):
    """Text -> raw items per op (tuples from the Transformer); syntax errors as SpecError."""
    check_size(text, path)
    check_nesting(text, path)
    try:
        tree = _lark().parse(text if text.endswith("\n") else text + "\n")
    except lark.exceptions.LarkError as e:
        raise _syntax_error(e, path, text) from None
    check_depth(tree, path, text)
    try:
        return _ToIR().transform(tree)
    except lark.exceptions.VisitError as e:
        inner = e.orig_exc
        if isinstance(inner, _Invalid):
            raise SpecError([Diagnostic(path, inner.loc.line, inner.loc.column, inner.message)],
                            text) from None
        raise
