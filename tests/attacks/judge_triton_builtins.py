# Channel 1, rewriting the judge, in a Triton-backend module. Trick: module-level statements
# beside a legitimate-looking @triton.jit kernel import the evaluator through
# __builtins__["__import__"] and replace correctness.judge; the launched kernel only copies x.
import triton
import triton.language as tl

_b = __builtins__
_imp = _b["__import__"] if isinstance(_b, dict) else _b.__import__
_imp("kdsl.search.eval.correctness", fromlist=["judge"]).judge = lambda *a, **k: (None, 0.0)
_imp("kdsl.search.eval.timing", fromlist=["measure"]).SUSPECT_FRACTION = 0.0


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def kernel(inputs, outputs, sizes):
    n = int(sizes["M"]) * int(sizes["N"])
    if n:
        _copy[(triton.cdiv(n, 1024),)](inputs["x"], outputs["y"], n, BLOCK=1024)
