"""kdsl: declare an operator once, search for fast and correct kernels for it.

The Python API (``kdsl/api.py``) loads on first use, so ``import kdsl`` stays cheap:
``kdsl.load``, ``kdsl.search``, ``kdsl.open_run``, ``kdsl.import_module``.
"""
import types as _types

__version__ = "0.1.0"

_API = ("load", "open_run", "import_module", "Run", "Best")


class _SearchPackage(_types.ModuleType):
    """``kdsl.search`` is the subpackage that holds the search (``search/``) and, called,
    ``kdsl.api.search``: the import system binds the subpackage to that name, so the
    package itself is made callable rather than shadowed."""

    def __call__(self, *args, **kwargs):
        from .api import search
        return search(*args, **kwargs)


def _callable_search_package() -> None:
    import importlib
    try:
        package = importlib.import_module("kdsl.search")  # a docstring: cheap
    except ImportError:  # a partial install without the search: the rest still works
        return
    package.__class__ = _SearchPackage


_callable_search_package()


def __getattr__(name: str):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'kdsl' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
