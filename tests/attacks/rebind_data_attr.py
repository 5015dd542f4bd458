# Channel 6, rebinding an output. Trick: outputs["y"].data = <new tensor> swaps the storage
# under the caller's tensor object: the memory the harness allocated (and poisoned) is never
# written, yet the object it reads back holds the answer.
import numpy as np
import torch


def kernel(inputs, outputs, sizes):
    a = inputs["x"].numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    outputs["y"].data = torch.from_numpy((e / e.sum(axis=1, keepdims=True)).astype(np.float32))
