"""Does the baseline agree with the reference? (what ``kdsl check`` verifies)."""
from __future__ import annotations

from dataclasses import dataclass

from . import baseline, ir
from .cases import draw, generate, upper_shapes
from .compare import compare
from .reference import reference


@dataclass(frozen=True)
class Agreement:
    op: str
    dtypes: tuple[str, ...]
    cases: int
    failures: tuple[str, ...]
    upper: int = 0                         # the judge's upper-end cases run
    upper_failures: tuple[str, ...] = ()   # where the baseline raised on one of them

    @property
    def ok(self) -> bool:
        return not self.failures and not self.upper_failures


# the upper ends' cases the judge adds (each range at its maximum, the others small) are
# run too, at most this many elements, and a baseline that raises there fails the check: an
# outsider's group norm whose test range allowed one channel a group passed `kdsl check`
# and then failed every evaluation, torch's training-mode norm refusing the judge's upper
# case (B=1, one channel, one group). Only a raise: a half-precision baseline may round
# past the tolerance on such edge shapes (KernelBench 34's f16 instance norm over two
# elements) where the kernels, computing in float32, pass
UPPER_CHECK_ELEMENTS = 1 << 18


def check_agreement(op: ir.Op, seed: int = 0, per_dtype: int = 8, device: str = "cpu") -> Agreement:
    failures = []
    cases = generate(op, seed, per_dtype)
    upper = [draw(op, shape, seed) for shape in upper_shapes(op, budget=UPPER_CHECK_ELEMENTS)]
    raised = []
    for case in upper:
        try:
            baseline.run(op, case.sizes, case.dtype, case.inputs, device)
        except Exception as e:  # the baseline is user code: report, never crash
            raised.append(f"{case.shape.describe()}: baseline raised "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
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
    return Agreement(op.name, op.dtype_choices, len(cases), tuple(failures), len(upper),
                     tuple(raised))
