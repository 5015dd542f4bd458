# Channel 4, slowing the baseline, spelled out: torch.softmax = <slow wrapper> at module level.
# A deny-list guard sees "torch.softmax" and rejects the module, but only after the module was
# loaded: the patch already sits in the worker for every later job's baseline.
import time

import numpy as np
import torch

_orig = torch.softmax


def _slow(*args, **kwargs):
    time.sleep(0.15)
    return _orig(*args, **kwargs)


torch.softmax = _slow


def kernel(inputs, outputs, sizes):
    a = inputs["x"].numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    outputs["y"].numpy()[...] = e / e.sum(axis=1, keepdims=True)
