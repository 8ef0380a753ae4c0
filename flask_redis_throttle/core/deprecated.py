"""Deprecated names: the old name of a renamed class, function or value
still works, with a :class:`DeprecationWarning` that names the new one.

Nothing has been released yet, so only a name some code of the package
still answers to is kept here; each goes with the first release. A module
that renamed something keeps a map of its old names and answers them from
its ``__getattr__`` (PEP 562)::

    _RENAMED = {"Old": "New"}


    def __getattr__(name: str) -> object:
        return renamed(__name__, name, _RENAMED, globals())
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

__all__ = ["renamed"]


def renamed(module: str, name: str, renames: Mapping[str, str], namespace: Mapping[str, object]) -> object:
    """What the old name ``name`` of ``module`` now is, with a warning.

    :raises AttributeError: if ``name`` is not an old name, as a module does.
    """
    new = renames.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is deprecated; use {module}.{new}", DeprecationWarning, stacklevel=3)
    return namespace[new]
