"""Packages are found, not listed: every folder with an ``__init__.py`` under a folder that
``[tool.setuptools.package-dir]`` in pyproject.toml maps (``search/`` is ``kdsl.search``,
``search/eval/`` is ``kdsl.search.eval``). pyproject.toml's own ``packages.find`` cannot do
this: it names a package after its path from ``where``, never after a mapping.
Everything else about the distribution is in pyproject.toml.
"""
from __future__ import annotations

import os
import sys

from setuptools import find_packages, setup

if sys.version_info >= (3, 11):
    import tomllib
else:  # a build requirement on Python 3.10 (pyproject.toml)
    import tomli as tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def package_dir() -> dict[str, str]:
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-dir"]


def packages() -> list[str]:
    """Each mapped package and every package below its folder, under the mapped name."""
    found = set()
    for name, folder in package_dir().items():
        found.add(name)
        found.update(f"{name}.{sub}" for sub in find_packages(os.path.join(HERE, folder)))
    return sorted(found)


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import packages()
    setup(packages=packages())
