# Channel 5, doing the work with the baseline library by another route, in a Triton-backend
# module that passes allow-list guards: a @triton.jit kernel is defined and never launched; the
# wrapper calls the unbound torch.Tensor.softmax on the input.
import torch
import triton
import triton.language as tl


@triton.jit
def _unused(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=cols < N), mask=cols < N)


def kernel(inputs, outputs, sizes):
    outputs["y"].copy_(torch.Tensor.softmax(inputs["x"], -1))
