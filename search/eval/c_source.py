"""C candidates, for the guards: comments and literals stripped, then plain text checks."""
from __future__ import annotations

import re

Finding = tuple[int, str]

_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_c(text: str) -> str:
    """C text with comments and string/char literals blanked (line numbers kept)."""
    def blank(m):
        s = m.group(0)
        keep = '""' if s.startswith('"') else "' '" if s.startswith("'") else ""
        return keep + "\n" * s.count("\n")
    return _TOKENS.sub(blank, text)


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def matches(code: str, pattern: str, message: str) -> list[Finding]:
    return [(line_of(code, m.start()), message.format(m.group(1)))
            for m in re.finditer(pattern, code)]


def calls_into_python(code: str) -> list[Finding]:
    out = matches(code, r"#\s*include\s*[<\"]((?:Python|torch/|ATen/|c10/|pybind11)[^>\"]*)",
                  "includes {}")
    out += matches(code, r"\b(_?Py[A-Z]\w*)\s*\(", "calls back into Python: {}")
    out += matches(code, r"\b((?:at|torch|c10|pybind11)::\w+)", "uses {}")
    return sorted(set(out))


def mutable_state(code: str) -> list[Finding]:
    """File-scope variables and ``static`` locals that are not ``const``."""
    out = []
    depth, start, function_body = 0, 0, False
    no_pp = re.sub(r"^[ \t]*#[^\n]*", lambda m: " " * len(m.group(0)), code, flags=re.M)
    for i, ch in enumerate(no_pp):
        if ch == "{":
            if depth == 0:  # a function body follows a parameter list; a struct or list does not
                function_body = bool(re.search(r"\)\s*(__attribute__\s*\(\(.*\)\)\s*)?$",
                                               no_pp[start:i]))
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and function_body:
                start = i + 1
        elif ch == ";" and depth == 0:
            stmt = no_pp[start:i]
            if _is_variable(stmt):
                first = len(stmt) - len(stmt.lstrip())
                out.append((line_of(no_pp, start + first),
                            f"file-scope variable '{' '.join(stmt.split())[:60]}' "
                            f"(state kept between calls)"))
            start = i + 1
    for m in re.finditer(r"\bstatic\b([^;{(]*)(;|=)", no_pp):
        decl = m.group(1)
        line_start = no_pp.rfind("\n", 0, m.start()) + 1
        prefix = no_pp[line_start:m.start()]
        if "const" in decl or "const" in prefix or line_of(no_pp, m.start()) in \
                {line for line, _ in out}:
            continue
        out.append((line_of(no_pp, m.start()),
                    f"static variable '{' '.join(decl.split())[:60]}' (state kept between calls)"))
    return sorted(set(out))


def _is_variable(stmt: str) -> bool:
    s = " ".join(re.sub(r"\{[^{}]*\}", "{}", stmt).split())
    if not s or s.startswith(("typedef", "extern", "using", "namespace", "template")):
        return False
    if re.match(r"^(struct|union|enum)\b[^=]*\{\}\s*$", s) or \
            re.match(r"^(struct|union|enum) \w+$", s):
        return False
    if re.search(r"\bconst\b|\bconstexpr\b", s.split("=")[0]):
        return False
    head = s.split("=")[0]
    if "(" in head and re.search(r"\w\s*\([^()]*\)\s*(__attribute__.*)?$", head.strip()):
        return False  # a prototype
    return bool(re.search(r"\w", head))

