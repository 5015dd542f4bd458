# Control: a plain, correct Triton softmax (one program a row; interpreted on the CPU). Must be
# ACCEPTED (untimed on cpu).
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    e = tl.where(mask, e, 0.0)
    tl.store(y_ptr + row * N + cols, e / tl.sum(e, axis=0), mask=mask)


def kernel(inputs, outputs, sizes):
    M, N = int(sizes["M"]), int(sizes["N"])
    if M == 0 or N == 0:
        return
    _softmax[(M,)](inputs["x"], outputs["y"], N, BLOCK=triton.next_power_of_2(N))
