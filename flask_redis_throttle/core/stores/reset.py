"""Deleting one identity's counters, found with ``SCAN``.

Every counter of an identity carries its hash tag, ``<prefix>{<tag>}:``, and
then its scope (see :mod:`flask_redis_throttle.core.engine.keys`), so one glob pattern
finds all of them, or those of one scope. ``SCAN`` walks the keyspace a slice
at a time, so a large Redis is never blocked the way ``KEYS`` would block it;
on a Redis Cluster client, redis-py's ``scan_iter`` walks every primary.

:func:`reset_identity` is what ``flask ratelimit reset`` and
:meth:`RateLimit.reset <flask_redis_throttle.RateLimit.reset>` both do.

This module imports neither Flask nor Redis: it needs only a client's
``scan_iter`` and ``delete``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Protocol

from ..engine.keys import Identity, escape_scope

__all__ = ["counter_pattern", "delete_counters", "glob_escape", "reset_identity"]

#: How many keys one ``DEL`` deletes at most, and the ``COUNT`` hint of ``SCAN``.
BATCH = 500

_GLOB = re.compile(r"([\\*?\[\]])")


class _Client(Protocol):
    def scan_iter(self, match: str, count: int) -> Iterable[Any]: ...

    def delete(self, *names: Any) -> Any: ...


def glob_escape(text: str) -> str:
    """``text`` with the characters special to Redis glob patterns (``*?[]\\``) escaped."""
    return _GLOB.sub(r"\\\1", text)


def counter_pattern(prefix: str, tag: str | None, scope: str | None = None, beneath: bool = False) -> str:
    """The ``SCAN`` pattern of an identity's counters, or every identity's,
    in one scope or all.

    :param prefix: the key prefix (``RATELIMIT_KEY_PREFIX``).
    :param tag: the identity's hash tag, from
        :func:`~flask_redis_throttle.core.engine.keys.identity_tag`; None for every identity.
    :param scope: only this scope's counters, or None for every scope.
    :param beneath: instead of ``scope``'s, those of every scope named
        ``scope:...`` (a dynamic limit of the Flask-Limiter shim counts each
        of its strings in one).
    """
    tail = ""
    if scope is not None:
        tail = escape_scope(scope + ":") if beneath else escape_scope(scope) + ":"
    if tag is None:  # a tag never holds a brace
        return glob_escape(f"{prefix}{{") + "*" + glob_escape(f"}}:{tail}") + "*"
    return glob_escape(f"{prefix}{{{tag}}}:{tail}") + "*"


def delete_counters(client: _Client, pattern: str) -> int:
    """Delete every key that matches ``pattern``, in batches, and return how many were deleted.

    Keys deleted by someone else meanwhile (or expired) are not counted.
    ``SCAN`` may return a key more than once (Valkey does while its table
    rehashes); each is sent to ``DEL`` once.

    :raises redis.RedisError: if Redis cannot answer; keys of batches already
        sent stay deleted.
    """
    deleted = 0
    seen: set[Any] = set()
    batch: list[Any] = []
    for key in client.scan_iter(match=pattern, count=BATCH):
        if key in seen:
            continue
        seen.add(key)
        batch.append(key)
        if len(batch) == BATCH:
            deleted += int(client.delete(*batch))
            batch = []
    if batch:
        deleted += int(client.delete(*batch))
    return deleted


class _Resettable(Protocol):
    def reset(self, identity: Identity | None, scopes: Iterable[str | None]) -> int: ...


def reset_identity(throttle: _Resettable, identity: Identity | None, scopes: Iterable[str | None] = (None,)) -> int:
    """Delete ``identity``'s counters (and penalties) in each of ``scopes``
    (None for every scope), and forget this process's cached refusals: what
    :meth:`Throttle.reset <flask_redis_throttle.core.engine.throttle.Throttle.reset>`
    does, which this calls.

    :returns: how many keys were deleted.
    :raises redis.RedisError: if Redis cannot answer.
    """
    return throttle.reset(identity, scopes)
