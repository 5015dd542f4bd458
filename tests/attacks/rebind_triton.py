# Channel 6, rebinding an output, in a Triton-backend module: the Triton kernel writes a tensor
# the wrapper allocated itself, which is then bound to outputs["y"] in place of the caller's.
import torch
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
    y = torch.empty((M, N), dtype=torch.float32)
    if M and N:
        _softmax[(M,)](inputs["x"], y, N, BLOCK=triton.next_power_of_2(N))
    outputs["y"] = y
