"""Filling a frozen slots dataclass on the hot path.

A frozen dataclass's ``__init__`` sets each field with
``object.__setattr__``, looked up and called once per field, since the
class's own ``__setattr__`` refuses. Every request makes one
:class:`~flask_redis_throttle.core.throttle.Decision`, of ten fields: setting
its slots through their descriptors instead takes half the time.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["filler"]

_T = TypeVar("_T")


def filler(cls: type[_T]) -> Callable[..., _T]:
    """A function that makes a ``cls`` of its ten fields' values, given in
    their order, as its ``__init__`` would: but without running it, so with
    no defaults and no ``__post_init__``.

    :raises TypeError: if ``cls`` is not a slots dataclass of ten fields.
    """
    names = getattr(cls, "__match_args__", ())
    if len(names) != 10 or getattr(cls, "__slots__", None) is None:
        raise TypeError(f"{cls.__name__} is not a slots dataclass of ten fields")
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = (getattr(cls, name).__set__ for name in names)
    new = object.__new__

    def fill(v0: Any, v1: Any, v2: Any, v3: Any, v4: Any, v5: Any, v6: Any, v7: Any, v8: Any, v9: Any) -> _T:
        # Unrolled: a loop over the setters costs half of what it saves.
        made = new(cls)
        s0(made, v0)
        s1(made, v1)
        s2(made, v2)
        s3(made, v3)
        s4(made, v4)
        s5(made, v5)
        s6(made, v6)
        s7(made, v7)
        s8(made, v8)
        s9(made, v9)
        return made

    return fill
