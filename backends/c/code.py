"""C code as a small tree: blocks of lines and loops, rendered with their pragmas.

A ``Block`` keeps hoisted declarations (``pre``) apart from its main content, so
code hoisted into an enclosing loop while its inner loops are being built still
lands before them. Whether a loop gets ``#pragma omp simd`` is decided when it is
rendered: only innermost loops without a carried dependency are vectorized.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Block:
    pre: list = field(default_factory=list)   # str | Loop
    main: list = field(default_factory=list)  # str | Loop
    memo: dict = field(default_factory=dict)

    def items(self):
        return self.pre + self.main

    def has_loop(self) -> bool:
        return any(isinstance(x, Loop) or (isinstance(x, If) and (x.then.has_loop() or
                                                                   x.orelse.has_loop()))
                   for x in self.items())


@dataclass
class Loop:
    var: str
    lo: str
    hi: str
    step: str = "1"
    body: Block = field(default_factory=Block)
    vector: bool = True           # may take omp simd when innermost
    reductions: list = field(default_factory=list)  # (omp op, variable)
    head: list = field(default_factory=list)        # extra pragmas (omp for ...)


@dataclass
class If:
    """``if (cond) { then } else { orelse }`` (no else when ``orelse`` is empty)."""
    cond: str
    then: Block = field(default_factory=Block)
    orelse: Block = field(default_factory=Block)


@dataclass(frozen=True)
class Style:
    """Rendering choices from the genome."""
    simd: bool = True
    simdlen: int | None = None
    unroll: int | None = None


def render_lines(items: list, style: Style, indent: int) -> list[str]:
    out = []
    pad = "  " * indent
    for x in items:
        if isinstance(x, Loop):
            out += render_loop(x, style, indent)
        elif isinstance(x, If):
            out.append(pad + f"if ({x.cond}) {{")
            out += render_lines(x.then.items(), style, indent + 1)
            if x.orelse.items():
                out.append(pad + "} else {")
                out += render_lines(x.orelse.items(), style, indent + 1)
            out.append(pad + "}")
        else:
            out += [pad + line for line in x.split("\n")]
    return out


def render_loop(loop: Loop, style: Style, indent: int) -> list[str]:
    pad = "  " * indent
    out = [pad + h for h in loop.head]
    innermost = not loop.body.has_loop()
    simd = innermost and loop.vector and style.simd and not loop.head
    if innermost and style.unroll and not loop.head and not simd:
        # GCC takes no unroll pragma together with omp simd on one loop
        out.append(pad + f"#pragma GCC unroll {style.unroll}")
    if simd:
        clause = "".join(f" reduction({op}:{var})" for op, var in loop.reductions)
        if style.simdlen:
            clause += f" simdlen({style.simdlen})"
        out.append(pad + "#pragma omp simd" + clause)
    step = "++" + loop.var if loop.step == "1" else f"{loop.var} += {loop.step}"
    out.append(pad + f"for (int64_t {loop.var} = {loop.lo}; {loop.var} < {loop.hi}; {step}) {{")
    out += render_lines(loop.body.items(), style, indent + 1)
    out.append(pad + "}")
    return out


def nested_loop_free(items: list) -> bool:
    return not any(isinstance(x, (Loop, If)) for x in items)
