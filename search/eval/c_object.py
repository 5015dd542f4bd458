"""C candidates as the compiler sees them: preprocessed, and compiled to an object.

The guards read the candidate after ``cc -E`` (so no macro or token paste hides
a name; only lines of the candidate's own file are kept, at their own line
numbers) and the object ``cc -c`` makes of it, with the c backend's compiler
and flags: its undefined symbols must be on an allow-list (libm, the OpenMP
runtime's parallel entry points, memcpy/memset/memmove, malloc/free, libgcc's
arithmetic helpers), it may hold no writable data (a ``static`` behind any macro
lands in .data or .bss), and nothing in it runs when it is loaded. Nothing here
runs the candidate; the analysis is cached by a key like the build's, in the judge's
memory only.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kdsl.backends.c import build

GUARD_VERSION = "c-object-2"
PREPROCESS_TIMEOUT_S = 60
COMPILE_TIMEOUT_S = 300

# ---- the allow-lists ----------------------------------------------------------

HEADERS = frozenset({"math.h", "stdint.h", "stddef.h", "stdbool.h", "stdlib.h", "string.h",
                     "float.h", "limits.h", "omp.h", "immintrin.h", "x86intrin.h",
                     "arm_neon.h"})
LIBM = ("acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 exp10 expm1 "
        "log log10 log1p log2 logb ilogb frexp ldexp scalbn scalbln modf pow sqrt cbrt hypot "
        "erf erfc lgamma tgamma ceil floor trunc round lround llround rint lrint llrint "
        "nearbyint fmod remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma "
        "fabs sincos").split()
ALLOWED_SYMBOLS = frozenset(
    [f + s for f in LIBM for s in ("", "f", "l")] +
    "memcpy memset memmove memcmp malloc calloc realloc free aligned_alloc posix_memalign "
    "__stack_chk_fail __stack_chk_guard __memcpy_chk __memset_chk __memmove_chk "
    "omp_get_thread_num omp_get_num_threads omp_get_max_threads omp_get_num_procs "
    "omp_in_parallel omp_get_level omp_get_team_num omp_get_num_teams omp_get_wtime "
    "GOMP_parallel GOMP_barrier GOMP_critical_start "
    "GOMP_critical_end GOMP_critical_name_start GOMP_critical_name_end GOMP_atomic_start "
    "GOMP_atomic_end GOMP_single_start GOMP_single_copy_start GOMP_single_copy_end "
    "GOMP_ordered_start GOMP_ordered_end GOMP_task GOMP_taskwait GOMP_taskyield "
    "GOMP_taskgroup_start GOMP_taskgroup_end GOMP_parallel_reductions "
    "_GLOBAL_OFFSET_TABLE_".split())
ALLOWED_PATTERNS = (
    re.compile(r"GOMP_(parallel_)?loop_\w+"),          # every schedule of '#pragma omp for'
    re.compile(r"GOMP_(parallel_)?sections\w*"),
    re.compile(r"GOMP_taskloop\w*|GOMP_doacross_\w+"),
    re.compile(r"_ZGV[bcden][NM]\d+[vlLRUu\d]*_(%s)[fl]?" % "|".join(LIBM)),  # libmvec
    re.compile(r"__(%s)[fl]?_finite" % "|".join(LIBM)),
    # libgcc's arithmetic helpers (128-bit integers, half/bf16 floats, complex)
    re.compile(r"__(extend|trunc|float|floatun|fix|fixuns|mul|div|add|sub|neg|pow|popcount|"
               r"clz|ctz|ffs|parity|bswap|udiv|umod|mod|udivmod|lshr|ashl|ashr|cmp|ucmp|"
               r"unord|eq|ne|ge|gt|le|lt)[a-z]*\d"),
)
# The entry points of GCC's older split form of a parallel region start a team and return
# with its threads still running (until a GOMP_parallel_end the kernel need never call):
# work after the call returns. '#pragma omp parallel' compiles to GOMP_parallel and its
# combined forms, which return once the team is done.
RUNS_ON = re.compile(r"GOMP_parallel(_\w+)?_start|GOMP_parallel_end")


# A few refusals get a sharper message than "not on the allow-list".
WHY = ((re.compile(r"_?Py[A-Z_]\w*"), "the Python C API"),
       (RUNS_ON, "starts an OpenMP team that runs on after the call returns"),
       (re.compile(r"dl(open|sym|mopen|vsym|close|error|info)"), "loads code at run time"),
       (re.compile(r"pthread_\w+|thrd_\w+|clone|fork|vfork"), "starts a thread or process"),
       (re.compile(r"omp_set_\w+|kmp_\w+"), "changes the OpenMP runtime for the whole process"),
       (re.compile(r"(set|get|put|unset|secure_get)env|environ|__environ"),
        "the process environment"),
       (re.compile(r"system|popen|exec\w*|posix_spawn\w*|syscall|mmap\w*|mprotect|ptrace"),
        "the operating system"))


def symbol_allowed(name: str) -> bool:
    if RUNS_ON.fullmatch(name):
        return False
    return name in ALLOWED_SYMBOLS or any(p.fullmatch(name) for p in ALLOWED_PATTERNS)


def why_refused(name: str) -> str:
    for pattern, why in WHY:
        if pattern.fullmatch(name):
            return why
    return "not on the allow-list"


# ---- running the compiler -----------------------------------------------------

def flags(mode: str) -> tuple[str, ...]:
    """The c backend's flags for an object (``-c``) or a preprocessed text (``-E``)."""
    return tuple(f for f in build.CFLAGS if f != "-shared") + (mode,)


@dataclass
class Analysis:
    """What the guards need from the compiler, JSON-serialisable for the cache."""
    preprocessed: dict = field(default_factory=dict)  # str(line) -> text of that line
    includes: list = field(default_factory=list)      # headers the file itself includes
    preprocess_error: str = ""
    compile_error: str = ""
    undefined: list = field(default_factory=list)
    writable: list = field(default_factory=list)      # [section, size, [symbols]]
    load_time: list = field(default_factory=list)     # constructors, ifunc resolvers


_ANALYSES: dict[str, Analysis] = {}  # this judge's own, never read back from a file
_LINKED: dict[str, str] = {}         # build key -> sha256 of the shared object it linked
_KEPT = 512


def analyse(source: str) -> Analysis:
    """The analysis of ``source``, cached in this process only: a file in the cache folder
    can be written by any candidate process (the same user), and a clean analysis planted
    there for another source's key let that source past every guard."""
    key = build.build_key(source, (GUARD_VERSION, *flags("-c")))
    if key in _ANALYSES:
        return _ANALYSES[key]
    with tempfile.TemporaryDirectory(prefix="kdsl-guard-") as tmp:
        src = Path(tmp) / "candidate.c"
        src.write_text(source)
        a = Analysis()
        ok, pre = _run([build.COMPILER, *flags("-E"), str(src)], PREPROCESS_TIMEOUT_S)
        if not ok:
            a.preprocess_error = pre
        else:
            a.preprocessed, a.includes = main_file_lines(pre, str(src))
        obj = Path(tmp) / "candidate.o"
        ok, out = _run([build.COMPILER, *flags("-c"), str(src), "-o", str(obj)],
                       COMPILE_TIMEOUT_S)
        if not ok:
            a.compile_error = out
        else:
            try:
                read_object(obj.read_bytes(), a)
            except (ValueError, struct.error) as e:
                a.compile_error = f"cannot read the object: {e}"
            else:
                _link_for_build(source, obj)
    if len(_ANALYSES) >= _KEPT:
        _ANALYSES.pop(next(iter(_ANALYSES)))
    _ANALYSES[key] = a
    return a


def linked_digest(source: str) -> str | None:
    """The sha256 of the shared object this judge linked for ``source``'s build, if any:
    the candidate's process loads the cached one only if it still has that digest."""
    return _LINKED.get(build.build_key(source))


def _link_for_build(source: str, obj: Path) -> None:
    """The object linked into the shared object the c backend's build would compile, in
    its cache: one compile serves the guard and the build (a C candidate was compiled
    twice, once for each). Same source, same flags (``-fPIC`` included), so the same code;
    a failed link leaves the build to compile as before. Linked afresh every time (what
    is in the folder may have been put there by a candidate), and its digest kept."""
    key = build.build_key(source)
    so = build.cache_dir() / f"{key}.so"
    so.parent.mkdir(parents=True, exist_ok=True)
    tmp = so.with_suffix(f".{os.getpid()}.link")
    ok, _ = _run([build.COMPILER, "-fopenmp", "-shared", str(obj), "-o", str(tmp), "-lm"],
                 COMPILE_TIMEOUT_S)
    if ok:
        _LINKED[key] = hashlib.sha256(tmp.read_bytes()).hexdigest()
        (so.parent / f"{key}.c").write_text(source)
        os.replace(tmp, so)
    else:
        tmp.unlink(missing_ok=True)


def _run(argv: list[str], timeout: int) -> tuple[bool, str]:
    """(True, stdout), or (False, a one-line reason the compiler failed)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"{argv[0]} took over {timeout}s"
    except OSError as e:
        return False, f"cannot run {argv[0]}: {e}"
    if proc.returncode != 0:
        log = proc.stderr
        return False, next((ln.strip() for ln in log.splitlines() if "error" in ln),
                           log[:200].strip())
    return True, proc.stdout


_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)\s*$')


def main_file_lines(text: str, main: str) -> tuple[dict, list]:
    """The preprocessed lines of ``main`` keyed by their source line, and what it includes."""
    lines: dict[str, str] = {}
    includes = []
    current, line = None, 0
    for raw in text.splitlines():
        m = _MARKER.match(raw)
        if m:
            new_file, flags_ = m.group(2), m.group(3).split()
            if "1" in flags_ and current == main:
                includes.append(new_file)
            current, line = new_file, int(m.group(1))
            continue
        if current == main:
            key = str(line)
            lines[key] = f"{lines[key]} {raw}" if key in lines else raw
        line += 1
    return lines, includes


# ---- reading the object (ELF64, little-endian) ---------------------------------

SHF_WRITE, SHF_ALLOC, SHF_TLS = 0x1, 0x2, 0x400
SHT_SYMTAB, SHT_NOBITS = 2, 8
SHT_INIT = {14, 15, 16}  # init_array, fini_array, preinit_array
STT_OBJECT, STT_COMMON, STT_TLS, STT_GNU_IFUNC = 1, 5, 6, 10
SHN_UNDEF, SHN_COMMON = 0, 0xFFF2


def read_object(data: bytes, a: Analysis) -> None:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF object")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]

    def string(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return data[start:data.index(b"\0", start)].decode(errors="replace")

    names = [string(shstrndx, s[0]) for s in sections]
    per_section: dict[int, list[str]] = {}
    for i, s in enumerate(sections):
        if s[1] != SHT_SYMTAB:
            continue
        for j in range(1, s[5] // 24):
            st_name, info, _, shndx, _, size = struct.unpack_from("<IBBHQQ", data, s[4] + j * 24)
            name = string(s[6], st_name) if st_name else ""
            kind = info & 0xF
            if shndx == SHN_UNDEF and name:
                a.undefined.append(name)
            elif shndx == SHN_COMMON or kind == STT_COMMON:
                a.writable.append(["COMMON", size, [name]])
            elif kind == STT_GNU_IFUNC:
                a.load_time.append(f"ifunc resolver for '{name}'")
            elif kind in (STT_OBJECT, STT_TLS) and shndx < len(sections):
                per_section.setdefault(shndx, []).append(name)
    for i, (s, name) in enumerate(zip(sections, names)):
        _, kind, flags_, _, _, size = s[:6]
        if not flags_ & SHF_ALLOC or size == 0:
            continue
        if kind in SHT_INIT or name.startswith((".ctors", ".dtors", ".init", ".fini")):
            a.load_time.append(f"code run at load ({name})")
        elif (flags_ & SHF_WRITE or flags_ & SHF_TLS) and not name.startswith(".data.rel.ro"):
            a.writable.append([name, size, sorted(per_section.get(i, []))])
    a.undefined = sorted(set(a.undefined))


# ---- findings -------------------------------------------------------------------

def header_findings(a: Analysis) -> list[tuple[int, str]]:
    """Headers the file includes: each one of ``HEADERS``, from the compiler's own
    system folders. (By name alone, ``#include "/dev/shm/kd/math.h"`` passed: a header an
    earlier candidate had written, with a ``syscall`` in an inline function.)"""
    out = []
    for path in a.includes:
        if Path(path).name not in HEADERS:
            out.append((0, f"includes {path} (allowed headers: {', '.join(sorted(HEADERS))})"))
        elif not _in_system_folder(path):
            out.append((0, f"includes {path}, which is not the compiler's own "
                           f"{Path(path).name} (from {', '.join(system_include_dirs())})"))
    return out


def _in_system_folder(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(d + os.sep) for d in system_include_dirs())


@functools.lru_cache(maxsize=1)
def system_include_dirs() -> tuple[str, ...]:
    """The folders the compiler searches for ``<...>`` headers, as it lists them."""
    try:
        proc = subprocess.run([build.COMPILER, *flags("-E"), "-v", "-xc", "/dev/null",
                               "-o", "/dev/null"], capture_output=True, text=True,
                              timeout=PREPROCESS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    dirs, inside = [], False
    for line in proc.stderr.splitlines():
        if line.startswith("#include <...> search starts here"):
            inside = True
        elif line.startswith("End of search list"):
            break
        elif inside and line.startswith(" "):
            dirs.append(os.path.realpath(line.strip().split(" (")[0]))
    return tuple(dirs)


def symbol_findings(a: Analysis) -> list[tuple[int, str]]:
    if a.compile_error:
        return [(0, f"does not compile to an object, so its symbols cannot be checked: "
                    f"{a.compile_error}")]
    out = [(0, f"references {s}: {why_refused(s)} (allowed: libm, the OpenMP runtime's parallel "
               f"entry points, memcpy/memset/memmove, malloc/free)")
           for s in a.undefined if not symbol_allowed(s)]
    return out


def state_findings(a: Analysis) -> list[tuple[int, str]]:
    return [(0, f"writable data in {section} ({size} bytes"
                + (f": {', '.join(syms)}" if syms else "") + ") (state kept between calls)")
            for section, size, syms in a.writable]


def load_time_findings(a: Analysis) -> list[tuple[int, str]]:
    return [(0, f"{what}: nothing may run when the object is loaded") for what in a.load_time]


def preprocessed_text(a: Analysis, fallback: str) -> str:
    """The candidate's own lines after preprocessing, each at its source line."""
    if a.preprocess_error or not a.preprocessed:
        return fallback
    last = max(int(k) for k in a.preprocessed)
    return "\n".join(a.preprocessed.get(str(i), "") for i in range(1, last + 1)) + "\n"
