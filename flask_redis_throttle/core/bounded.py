"""Caches of things worked out once (request shapes, dynamic limits' strings, a cluster request's keys) that a
flood of new keys cannot grow: a full cache is forgotten at once, not kept ordered under a lock on every request.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from typing import TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


def remember(cache: dict[_K, _V], key: _K, value: _V, size: int) -> _V:
    """Keep ``value`` under ``key`` and return it, first forgetting all if ``cache`` holds ``size``."""
    if len(cache) >= size:
        cache.clear()
    cache[key] = value
    return value
