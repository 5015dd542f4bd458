# Channel 8, unbounded worker logs. Trick: module-level statements write 300 MB to stdout when
# the module is loaded; the kernel itself is a correct softmax.
import sys

import numpy as np

_line = "x" * ((1 << 20) - 1) + "\n"
for _ in range(300):
    sys.stdout.write(_line)
sys.stdout.flush()


def kernel(inputs, outputs, sizes):
    a = inputs["x"].numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    outputs["y"].numpy()[...] = e / e.sum(axis=1, keepdims=True)
