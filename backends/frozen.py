"""A loaded kernel module's containers made read-only, before its kernel first runs.

Module level may hold constants only (the guards), but a dict is a constant that can
still be filled: a kernel kept answers across the timed calls in a module-level ``{}``,
reached through a local alias that no source check follows. After loading, every
module-level dict, list and set (and those inside them) becomes a read-only view or a
tuple or frozenset, so reading a table of settings works and writing state fails; the
same for the default arguments of its functions.
"""
from __future__ import annotations

import types


def freeze(value):
    """``value`` with its containers made read-only, recursively."""
    if isinstance(value, dict):
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, set):
        return frozenset(freeze(v) for v in value)
    if isinstance(value, tuple):
        return tuple(freeze(v) for v in value)
    return value


def freeze_module(module: types.ModuleType) -> types.ModuleType:
    """Its containers read-only: module-level values, and the default arguments of its
    functions (a default ``([0],)`` counted calls across the timed runs)."""
    namespace = vars(module)
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, (dict, list, set, tuple)):
            namespace[name] = freeze(value)
        elif isinstance(value, types.FunctionType):
            if value.__defaults__:
                value.__defaults__ = freeze(value.__defaults__)
            if value.__kwdefaults__:
                value.__kwdefaults__ = {k: freeze(v) for k, v in value.__kwdefaults__.items()}
    return module
