# Channel 5, doing the work with the baseline library by another route, in a Triton-backend
# module: a @triton.jit kernel is defined for show, and the wrapper calls torch's softmax
# through os.sys.modules instead of launching it.
import os

import triton
import triton.language as tl


@triton.jit
def _unused(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=cols < N), mask=cols < N)


def kernel(inputs, outputs, sizes):
    lib = os.sys.modules["torch"]
    outputs["y"].copy_(lib.softmax(inputs["x"], dim=-1))
