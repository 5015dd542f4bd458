# Control (the opposite fault): a correct "keep the last T values of each segment" kernel. It
# reads only B*T of the L values, as it should, so it runs far below a floor that counts every
# input byte. Must be ACCEPTED.
import numpy as np


def kernel(inputs, outputs, sizes):
    T = int(sizes["T"])
    values = inputs["values"].numpy()
    offsets = inputs["offsets"].numpy()
    idx = offsets[1:, None] - T + np.arange(T)[None, :]
    keep = idx >= offsets[:-1, None]
    outputs["y"].numpy()[...] = np.where(keep, values[np.clip(idx, 0, None)], 0)
