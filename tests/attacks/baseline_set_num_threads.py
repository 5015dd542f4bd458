# Channel 4, slowing the baseline. Trick: getattr(torch, "set_num_threads")(1) on the first call
# leaves torch single-threaded for the worker's life, and the baseline is timed after the
# correctness stage.
import numpy as np
import torch


def kernel(inputs, outputs, sizes):
    getattr(torch, "set_num_" + "threads")(1)
    a = inputs["x"].numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    outputs["y"].numpy()[...] = e / e.sum(axis=1, keepdims=True)
