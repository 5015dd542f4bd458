# Control: a plain, correct numpy softmax. Must be ACCEPTED.
import numpy as np


def kernel(inputs, outputs, sizes):
    x = inputs["x"].numpy().astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    outputs["y"].numpy()[...] = e / e.sum(axis=1, keepdims=True)
