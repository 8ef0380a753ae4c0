"""The block cache: refusals remembered in process, so that a blocked client
costs Redis nothing until it may pass again (see :doc:`/blocks`).

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import threading
from collections.abc import KeysView, Mapping
from dataclasses import dataclass

#: The longest an entry is trusted, in seconds, however long its block lasts.
MAX_AGE = 1.0
_MAX_AGE_US = round(MAX_AGE * 1_000_000)


@dataclass(frozen=True, slots=True)
class Block:
    """One remembered refusal of one counter, of a ``cost`` (the only one
    refused from the cache) under a ``quota``, which had ``remaining`` left.

    :param until: when the request may pass, in microseconds on the cache's clock.
    :param reset: when the counter is back to its full quota, on that clock.
    :param expires: when the entry stops being trusted: ``until``, or
        :data:`MAX_AGE` after it was added if that is sooner.
    :param penalized: whether the refusal was a penalty's.
    """

    quota: int
    cost: int
    remaining: int
    until: int
    reset: int
    expires: int
    penalized: bool = False

    @classmethod
    def after(
        cls, sent: int, quota: int, cost: int, remaining: int, retry: int, reset: int, penalized: bool = False
    ) -> Block:
        """The block for a refusal of a request sent at ``sent``, whose reply
        gave ``retry`` and ``reset`` microseconds."""
        until = sent + retry
        return cls(quota, cost, remaining, until, sent + reset, min(until, sent + _MAX_AGE_US), penalized)


class BlockCache:
    """At most ``size`` counters known to be full, by Redis key: reads take
    no lock; adding does, and evicts the oldest entry of a full cache
    (forgetting a block only means asking Redis again)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a block cache holds at least one entry, not {size}")
        self.size = size
        self._blocks: dict[str, Block] = {}
        #: The blocks, by ``<key>=<window>``, to read only: whether it is
        #: empty is every request's test, which ``len(cache)`` would slow.
        self.entries: Mapping[str, Block] = self._blocks
        #: How many entries each counter has, by its Redis key.
        self._counters: dict[str, int] = {}
        #: A live view of the keys that have an entry: one set test tells a
        #: request none of whose keys is here, without naming its layers.
        self.blocked_keys: KeysView[str] = self._counters.keys()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._blocks)

    def find(self, layers: list[tuple[str, int]], cost: int, now: int) -> tuple[int, Block] | None:
        """The index in ``layers`` and the block of the blocked layer with
        the longest wait, if any, for a request of ``cost`` at ``now``
        (microseconds on the blocks' clock).

        :param layers: the request's layers, in the order of the script's
            plan: each as a name that says its key and window, and its quota.
        """
        blocks = self._blocks
        if not blocks:
            return None
        found: tuple[int, Block] | None = None
        for index, (key, quota) in enumerate(layers):
            block = blocks.get(key)
            if block is None:
                continue
            if block.expires <= now:
                # Its time has come: Redis decides again. (Another thread may
                # have replaced it meanwhile; only drop the one seen here.)
                with self._lock:
                    if blocks.get(key) is block:
                        del blocks[key]
                        self._count(key, -1)
                continue
            if block.quota != quota or block.cost != cost:
                continue  # another quota on a shared scope, or another cost
            if found is None or block.until > found[1].until:
                found = (index, block)
        return found

    def add(self, key: str, block: Block) -> None:
        """Remember that the counter ``key`` is full until ``block.until``."""
        blocks = self._blocks
        with self._lock:
            if blocks.pop(key, None) is None:  # else re-inserted as the newest
                self._count(key, 1)
            while len(blocks) >= self.size:
                oldest = next(iter(blocks))
                del blocks[oldest]
                self._count(oldest, -1)
            blocks[key] = block

    def clear(self) -> None:
        """Forget every block, after counters were reset in Redis, say."""
        with self._lock:
            self._blocks.clear()
            self._counters.clear()

    def _count(self, key: str, change: int) -> None:
        """Count an entry ``<Redis key>=<window>`` (or a bare key) in or out of its counter's, under the lock."""
        counter = key[: key.rfind("=")] if "=" in key else key
        left = self._counters.get(counter, 0) + change
        if left:
            self._counters[counter] = left
        else:
            del self._counters[counter]
