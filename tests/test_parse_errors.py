"""Malformed input of every kind: a located one-line error, the line and a caret, exit
code 2 from the CLI, and never a Python traceback. Fuzzed with hypothesis."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdsl import cli, parser, spec
from kdsl.errors import SpecError

SPECS = Path(__file__).resolve().parent.parent / "specs"
LIBRARY = {p.stem: p.read_text() for p in sorted(SPECS.glob("*.kspec"))}
HEAD = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>\S.*)$")
MB = 1 << 20
BIG = 30_000  # a large spec still under the limit (parser.MAX_SPEC_BYTES)
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_rendered(rendered: str, path: str, text: str | None) -> re.Match:
    """The first diagnostic is FILE:LINE:COL: error: ..., then the line and a caret under COL."""
    lines = rendered.split("\n")
    m = HEAD.match(lines[0])
    assert m, rendered[:500]
    assert m["file"] == path
    assert "Traceback" not in rendered
    line, col = int(m["line"]), int(m["col"])
    source = text.splitlines() if text else []
    if 1 <= line <= len(source):
        src, caret = lines[1], lines[2]
        assert src.startswith("  ") and caret.startswith("  ") and caret.endswith("^")
        if len(source[line - 1]) <= 200:
            assert len(caret) - 2 == col, (rendered[:500], col)
            assert src[2:] == "".join(c if c.isprintable() else " " if c == "\t" else "?"
                                      for c in source[line - 1])
    return m


def load_error(path: Path) -> tuple[SpecError, str | None]:
    with pytest.raises(SpecError) as info:
        spec.load(path)
    return info.value, info.value.text


def run_check(capsys, path) -> tuple[int, str, str]:
    rc = cli.main(["check", str(path)])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---- files that are not specs ---------------------------------------------------

RNG = random.Random(1234)
_softmax = LIBRARY["softmax"]
_line = "  y[i, j] = x[i, j] * 2\n"

BAD_FILES = {
    "empty": (b"", "no op declared", (1, 1)),
    "whitespace only": (b"   \n\t\n  \r\n   ", "no op declared", (1, 1)),
    "blank lines and comments only": (b"\n\n# nothing here\n   # nor here\n", "no op declared",
                                      (1, 1)),
    "NUL bytes": (b"op a\x00\x00\n", "binary data (a NUL byte)", (1, 5)),
    "only NUL bytes": (b"\x00" * 64, "binary data (a NUL byte)", (1, 1)),
    "invalid UTF-8": (b"op a\n  dims M, \xff\xfeN\n", "not UTF-8 text (byte 0xff)", (2, 11)),
    "truncated UTF-8 sequence": (b"op a\xc3", "not UTF-8 text (byte 0xc3)", (1, 5)),
    "latin-1 text": ("op caf\xe9\n".encode("latin-1"), "not UTF-8 text (byte 0xe9)", (1, 7)),
    "random bytes": (bytes(RNG.randrange(256) for _ in range(4096)), "", None),
    "control characters": (b"op a\n  \x07\x1b[31m\n", "", (2, 3)),
    "1 MB of random bytes": (bytes(RNG.randrange(256) for _ in range(MB)), "", None),
    "1 MB of printable garbage": ("".join(RNG.choice("abc[](),.=+-*/ \n#0123456789")
                                          for _ in range(MB)).encode(), "", None),
    "30 KB of printable garbage": ("".join(RNG.choice("abc[](),.=+-*/ \n#0123456789")
                                           for _ in range(BIG)).encode(), "", None),
    "30 KB of comments, then an error": (("# a comment line that is fine\n" * (BIG // 30)
                                          + "op a\n  dims N,\n").encode(),
                                         "unexpected end of line", (BIG // 30 + 2, 10)),
    "30 KB of statements after a bad line": (("op a\n  dims M N\n" + _line * (BIG // len(_line)))
                                             .encode(), "unexpected 'N'", (2, 10)),
    "30 KB line": (("op a\n  dims " + "M" * BIG + " +\n").encode(), "unexpected", (2, BIG + 9)),
    "1 MB of comments": (("# a comment line that is fine\n" * (MB // 30)).encode(),
                         "a spec is at most 32,768 bytes", (32_768 // 30 + 1, 32_768 % 30 + 1)),
    "1 MB line": (("op a\n  dims " + "M" * MB + " +\n").encode(), "a spec is at most",
                  (2, 32_768 - 5 + 1)),
    "1 MB of multibyte characters": (("op a\n  # " + "\u00e9" * MB + "\n").encode(),
                                     "a spec is at most", (2, (32_768 - 9) // 2 + 5)),
    "10,000 nested parentheses": (("op a\n  dims N\n  y[i] = " + "(" * 10_000 + "x"
                                   + ")" * 10_000 + "\n").encode(),
                                  "brackets nested deeper than 64 levels", (3, 74)),
    "10,000 nested brackets": (("op a\n  y[i] = " + "x[" * 10_000 + "i" + "]" * 10_000 + "\n")
                               .encode(), "brackets nested deeper than 64 levels", (2, 139)),
    "10,000 unary minus signs": (("op a\n  y[i] = " + "-" * 10_000 + "x\n").encode(),
                                 "expression nested deeper than", None),
    "7,000 nots": (("op a\n  y[i] = " + "not " * 7_000 + "x\n").encode(),
                    "expression nested deeper than", None),
    "a sum of 1,000 terms": (("op a\n  y[i] = " + " + ".join(["x[i]"] * 1_000) + "\n").encode(),
                              "expression nested deeper than", None),
    "a tower of 1,000 powers": (("op a\n  y[i] = " + "x ** " * 1_000 + "2\n").encode(),
                                "expression nested deeper than", None),
    "unterminated parenthesis": (b"op a\n  y[i] = (x[i] + 1\n", "unexpected end of line; expected",
                                 (2, 19)),
    "unterminated bracket": (b"op a\n  y[i] = x[i\n", "unexpected end of line; expected", (2, 13)),
    "unterminated shape": (b"op a\n  dims N\n  in x: f32 [N\n", "unexpected end of line", (3, 15)),
    "unterminated pad": (b"op a\n  y[i] = x[i] pad(0\n", "unexpected end of line", (2, 20)),
    "unterminated range": (b"op a\n  y[i] = sum(j in 0 ..) x[j]\n", "unexpected ')'", (2, 23)),
    "unterminated tolerance": (b"op a\n  tolerance f32(rtol=1e-5\n", "unexpected end of line",
                               (2, 26)),
    "unterminated test range": (b"op a\n  test N in 1..\n", "unexpected end of line", (2, 16)),
    "unterminated like": (b"op a\n  dims N\n  out y: like [N]\n", "unexpected '['", (3, 15)),
    "op without a name": (b"op\n", "unexpected end of line; expected a name", (1, 3)),
    "backslash at the end of the file": (b"op a \\", "unexpected end of file", (1, 7)),
    "end of file inside an expression": (b"op a\n  y[i] = x[i] +", "unexpected end", (2, 16)),
    "a reduction with no body": (b"op a\n  y[i] = 3 + sum(j)\n",
                                 "'sum(...)' needs a body after it", (2, 14)),
    "a statement before any op": (_line.encode() + _softmax.encode(), "unexpected 'y'", (1, 3)),
    "an item at the top level": (b"dims M, N\n", "unexpected 'dims'", (1, 1)),
    "a stray character": ((_softmax.replace("max(j)", "max(j) $")).encode(),
                          "unexpected '$'", (6, 20)),
    "a chained comparison": (_softmax.replace("N in 1..5000", "N in 1..5000 where 1 < N < 9")
                             .encode(), "unexpected '<'", (11, 47)),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_file_gives_one_located_error(name, tmp_path, capsys):
    data, words, where = BAD_FILES[name]
    path = tmp_path / "bad.kspec"
    path.write_bytes(data)
    err, text = load_error(path)
    m = check_rendered(err.render(), str(path), text)
    assert words in m["msg"]
    if where is not None:
        assert (int(m["line"]), int(m["col"])) == where, m[0]
    rc, out, stderr = run_check(capsys, path)
    assert rc == 2
    assert out == ""
    check_rendered(stderr.rstrip("\n"), str(path), text)
    assert len(stderr) < 20_000  # a window around the caret, never the whole file


def test_many_errors_are_capped(tmp_path, capsys):
    text = _softmax + "  baseline x\n" * 2000
    path = tmp_path / "many.kspec"
    path.write_text(text)
    rc, out, err = run_check(capsys, path)
    assert rc == 2
    assert err.count(": error: a second baseline") == 50
    assert err.rstrip().endswith("1950 more errors not shown")


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.kspec"
    path.write_bytes(b"\xef\xbb\xbf" + _softmax.encode())
    assert spec.load(path).ops[0].hash == spec.parse_text(_softmax).ops[0].hash


def test_nonexistent_file(tmp_path, capsys):
    path = tmp_path / "missing.kspec"
    err, _ = load_error(path)
    m = check_rendered(err.render(), str(path), None)
    assert m["msg"] == "cannot read: No such file or directory"
    rc, out, stderr = run_check(capsys, path)
    assert rc == 2 and HEAD.match(stderr.splitlines()[0])


def test_directory(tmp_path, capsys):
    err, _ = load_error(tmp_path)
    m = check_rendered(err.render(), str(tmp_path), None)
    assert m["msg"] == "cannot read: Is a directory"
    rc, _, stderr = run_check(capsys, tmp_path)
    assert rc == 2 and "Is a directory" in stderr


def test_check_goes_on_after_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.kspec"
    bad.write_text("op\n")
    good = tmp_path / "good.kspec"
    good.write_text(LIBRARY["swiglu"])
    rc = cli.main(["check", "--cases", "1", str(bad), str(good)])
    out = capsys.readouterr()
    assert rc == 2
    assert out.out.startswith("ok swiglu: 3 dtypes")
    assert out.err.startswith(f"{bad}:1:3: error:")


def test_blank_lines_with_spaces_and_indented_comments_are_allowed():
    text = _softmax.replace("  out y", "  \n\t\n  # the output\n  out y") + "  \n   \n"
    assert spec.parse_text(text).ops[0].hash == spec.parse_text(_softmax).ops[0].hash


def test_brackets_in_comments_do_not_count_as_nesting():
    text = "# " + "(" * 100 + "\n" + "".join("# [\n" for _ in range(100)) + _softmax
    assert spec.parse_text(text).ops[0].name == "softmax"


def test_unclosed_brackets_on_many_lines_report_the_first():
    text = "op a\n" + "  y[i] = (x[i]\n" * 100
    with pytest.raises(SpecError) as info:
        spec.parse_text(text, "t.kspec")
    d = info.value.diagnostics[0]
    assert (d.line, d.column, d.message) == (2, 15, "unexpected end of line; expected ')'")


def test_long_tokens_are_shortened_in_messages():
    with pytest.raises(SpecError) as info:
        spec.parse_text("op a\n  y[i = " + "x" * 5000 + "\n", "t.kspec")
    assert len(info.value.diagnostics[0].message) < 200


# ---- fuzzing ----------------------------------------------------------------------

def only_spec_errors(text: str) -> None:
    """parse_text either accepts ``text`` or raises a SpecError that renders located."""
    try:
        spec.parse_text(text, "fuzz.kspec")
    except SpecError as e:
        assert e.diagnostics
        check_rendered(e.render(), "fuzz.kspec", e.text)


TOKENS = ["op", "dims", "in", "out", "like", "pad", "baseline", "tolerance", "exact", "test",
          "bench", "where", "cpu:", "f32", "i64", "bf16", "bool", "offsets", "positive", "sum",
          "max", "topk", "sort", "cumsum", "argmax", "exp", "where", "segment_of", "x", "y", "i",
          "j", "M", "N", "K", "0", "1", "2.5", "1e-5", "-inf", "(", ")", "[", "]", ",", ":", "=",
          "..", "+", "-", "*", "/", "//", "%", "**", "<", "==", "and", "not", "|", "#", "\n",
          "\n  ", " ", "\\\n", "\t", "\r\n"]


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_random_text(text):
    only_spec_errors(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_fuzz_token_soup(text):
    only_spec_errors(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map(lambda ts: "op a\n  " + " ".join(ts)))
def test_fuzz_token_soup_inside_an_op(text):
    only_spec_errors(text)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data):
    try:
        text = parser.decode(data, "fuzz.kspec")
    except SpecError as e:
        check_rendered(e.render(), "fuzz.kspec", e.text)
        return
    only_spec_errors(text)


_TOKEN_RE = re.compile(r"\s+|[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?(?:e-?\d+)?|\*\*|//|\.\.|"
                       r"<=|>=|==|!=|.", re.S)


@st.composite
def mutants(draw):
    """A library spec with a few characters or tokens deleted, duplicated or swapped."""
    text = LIBRARY[draw(st.sampled_from(sorted(LIBRARY)))]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            pieces = list(text)
        else:
            pieces = _TOKEN_RE.findall(text)
        p = draw(st.integers(0, len(pieces) - 1))
        how = draw(st.sampled_from(["delete", "duplicate", "swap", "replace"]))
        if how == "delete":
            del pieces[p]
        elif how == "duplicate":
            pieces.insert(p, pieces[p])
        elif how == "swap" and p + 1 < len(pieces):
            pieces[p], pieces[p + 1] = pieces[p + 1], pieces[p]
        elif how == "replace":
            pieces[p] = draw(st.sampled_from(TOKENS))
        text = "".join(pieces)
    return text


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutants())
def test_fuzz_mutated_library_specs(text):
    only_spec_errors(text)
