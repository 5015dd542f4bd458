"""Symbolic sizes: torch.export's sympy expressions printed as kspec size arithmetic.

The exported graph sizes every tensor in terms of the dynamic input dims (sympy symbols);
a dim name stands for each symbol, and every other size is printed in those names.
"""
from __future__ import annotations

import sympy

from .errors import ImportFailure


def expr_of(size) -> sympy.Expr:
    """A size (an int or a torch.SymInt) as a sympy expression."""
    node = getattr(size, "node", None)
    return sympy.sympify(node.expr) if node is not None else sympy.Integer(int(size))


def evaluate(e: sympy.Expr, values: dict) -> int:
    """The size at concrete symbol values (``values``: sympy Symbol -> int)."""
    v = e.xreplace({s: sympy.Integer(values[s]) for s in e.free_symbols})
    return int(v)


class Printer:
    """Prints sympy size expressions with each symbol's dim name."""

    def __init__(self, names: dict):
        self.names = names  # sympy Symbol -> dim name

    def __call__(self, e) -> str:
        return self.text(sympy.sympify(e))

    def text(self, e) -> str:
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, sympy.Symbol):
            if e not in self.names:
                raise ImportFailure(f"size symbol {e} is not an input dim")
            return self.names[e]
        kind = type(e).__name__
        if isinstance(e, sympy.Add):
            terms = sorted(e.args, key=lambda a: isinstance(a, sympy.Number))
            out = self.text(terms[0])
            for t in terms[1:]:
                coeff, rest = t.as_coeff_Mul()
                if coeff < 0:
                    out += " - " + self.text(-t)
                else:
                    out += " + " + self.text(t)
            return f"({out})"
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff == -1:
                return f"(-{self.text(rest)})"
            return "(" + " * ".join(self.text(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            return "(" + " * ".join([self.text(e.base)] * int(e.exp)) + ")"
        # float scalars made of sizes (an attention's 1 / sqrt(D)): value expressions only
        if isinstance(e, sympy.Pow) and e.exp == sympy.Rational(1, 2):
            return f"sqrt({self.text(e.base)})"
        if isinstance(e, sympy.Pow) and e.exp == sympy.Rational(-1, 2):
            return f"rsqrt({self.text(e.base)})"
        if isinstance(e, sympy.Pow) and e.exp == -1:
            return f"(1.0 / {self.text(e.base)})"
        if isinstance(e, sympy.Float):
            return repr(float(e))
        if kind in ("ToFloat", "TruncToFloat", "Float"):
            return self.text(e.args[0])
        if kind in ("FloatTrueDiv", "IntTrueDiv"):
            return f"({self.text(e.args[0])} / {self.text(e.args[1])})"
        if kind in ("FloatPow", "PowByNatural"):
            base, exp = e.args
            if exp == sympy.Rational(1, 2) or exp == 0.5:
                return f"sqrt({self.text(base)})"
            return f"pow({self.text(base)}, {self.text(exp)})"
        if kind == "FloorDiv":
            return f"({self.text(e.args[0])} // {self.text(e.args[1])})"
        if kind in ("Mod", "PythonMod"):
            return f"({self.text(e.args[0])} % {self.text(e.args[1])})"
        if kind == "CeilToInt" or kind == "ceiling":
            arg = e.args[0]
            num, den = sympy.fraction(sympy.together(arg))
            return f"(-((-{self.text(num)}) // {self.text(den)}))"
        raise ImportFailure(f"cannot write the size expression {e} ({kind}) in kspec")
