"""Resetting one identity, under the documented names of what lives beside the keys in
:mod:`flask_redis_throttle.core.engine.keys`. This module imports neither Flask nor Redis."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ..engine.keys import BATCH, Identity, counter_pattern, delete_counters, glob_escape

__all__ = ["BATCH", "counter_pattern", "delete_counters", "glob_escape", "reset_identity"]


class _Resettable(Protocol):
    def reset(self, identity: Identity | None, scopes: Iterable[str | None]) -> int: ...


def reset_identity(throttle: _Resettable, identity: Identity | None, scopes: Iterable[str | None] = (None,)) -> int:
    """Delete ``identity``'s counters and penalties in each of ``scopes``
    (None for every scope) and forget this process's cached refusals, by
    :meth:`Throttle.reset <flask_redis_throttle.core.engine.throttle.Throttle.reset>`.

    :returns: how many keys were deleted.
    :raises redis.RedisError: if Redis cannot answer.
    """
    return throttle.reset(identity, scopes)
