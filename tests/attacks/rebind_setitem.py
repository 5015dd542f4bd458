# Channel 6, rebinding an output. Trick: outputs["y"] = <new tensor> instead of writing into the
# tensor the harness passed; the caller's buffer keeps its poison, the dict it reads does not.
import numpy as np
import torch


def kernel(inputs, outputs, sizes):
    a = inputs["x"].numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    outputs["y"] = torch.from_numpy((e / e.sum(axis=1, keepdims=True)).astype(np.float32))
