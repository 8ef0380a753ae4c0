"""Resetting one identity, under the documented names of what lives beside the keys in
:mod:`flask_redis_throttle.core.engine.keys`. This module imports neither Flask nor Redis."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..engine.keys import BATCH, Identity, counter_pattern, delete_counters, glob_escape

if TYPE_CHECKING:
    from ..engine.throttle import Throttle

__all__ = ["BATCH", "counter_pattern", "delete_counters", "glob_escape", "reset_identity"]


def reset_identity(throttle: Throttle, identity: Identity | None, scopes: Iterable[str | None] = (None,)) -> int:
    """Delete ``identity``'s counters and penalties in each of ``scopes`` (None for every scope) and forget
    this process's cached refusals: :meth:`~flask_redis_throttle.core.engine.throttle.Throttle.reset`.

    :returns: how many keys were deleted.
    :raises redis.RedisError: if Redis cannot answer.
    """
    return throttle.reset(identity, scopes)
