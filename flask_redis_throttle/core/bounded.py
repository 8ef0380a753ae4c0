"""Caches of things worked out once and kept, which new keys cannot grow
without bound.

The process keeps many such caches keyed by what requests bring: the
shapes of requests, dynamic limits' strings, the keys of a cluster request.
A flood of new ones (every request a new identity, a dynamic limit that
returns a new string each time) must not grow the process, and keeping
the most used of them is not worth a lock or an ordering on every
request: when a cache is full, all of it is forgotten at once, and each
entry is worked out again on its next use.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["remember"]

_K = TypeVar("_K")
_V = TypeVar("_V")


def remember(cache: dict[_K, _V], key: _K, value: _V, size: int) -> _V:
    """Keep ``value`` under ``key`` in ``cache`` and return it; first forget
    everything in ``cache`` if it already holds ``size`` entries."""
    if len(cache) >= size:
        cache.clear()
    cache[key] = value
    return value
