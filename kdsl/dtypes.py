"""The dtypes a spec may name, and their kinds."""
from __future__ import annotations

FLOAT = ("f64", "f32", "f16", "bf16")
INT = ("i64", "i32")
BOOL = ("bool",)
ALL = FLOAT + INT + BOOL


def kind(dtype: str) -> str:
    """'float', 'int' or 'bool'."""
    if dtype in FLOAT:
        return "float"
    if dtype in INT:
        return "int"
    if dtype in BOOL:
        return "bool"
    raise KeyError(dtype)


NUMPY = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "float32",
         "i64": "int64", "i32": "int32", "bool": "bool"}
TORCH = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
         "i64": "int64", "i32": "int32", "bool": "bool"}
# the least magnitude that rounds to infinity in each float dtype (its largest finite value
# and half a unit in its last place): a value past it is infinite once stored there
OVERFLOW = {"f64": float("inf"), "f32": (2 - 2 ** -23) * 2.0 ** 127 + 2.0 ** 103,
            "f16": 65520.0, "bf16": (2 - 2 ** -7) * 2.0 ** 127 + 2.0 ** 119}
ITEMSIZE = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "bool": 1}


def numpy_dtype(dtype: str):
    """The numpy storage of a dtype. bf16 is stored as float32 holding bf16 values."""
    import numpy as np
    return np.dtype(NUMPY[dtype])


def torch_dtype(dtype: str):
    import torch
    return getattr(torch, TORCH[dtype])
