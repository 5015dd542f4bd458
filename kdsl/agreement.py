"""Does the baseline agree with the reference? (what ``kdsl check`` verifies)."""
from __future__ import annotations

from dataclasses import dataclass

from . import baseline, ir
from .cases import generate
from .compare import compare
from .reference import reference


@dataclass(frozen=True)
class Agreement:
    op: str
    dtypes: tuple[str, ...]
    cases: int
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures


def check_agreement(op: ir.Op, seed: int = 0, per_dtype: int = 8, device: str = "cpu") -> Agreement:
    failures = []
    cases = generate(op, seed, per_dtype)
    for case in cases:
        ref = reference(op, case.sizes, case.inputs)
        try:
            got = baseline.run(op, case.sizes, case.dtype, case.inputs, device)
        except Exception as e:  # the baseline is user code: report, never crash
            failures.append(f"{case.shape.describe()}: baseline raised "
                            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        bad = compare(op, case.dtype, got, ref, case.inputs)
        if bad is not None:
            failures.append(f"{case.shape.describe()}: {bad}")
    return Agreement(op.name, op.dtype_choices, len(cases), tuple(failures))
