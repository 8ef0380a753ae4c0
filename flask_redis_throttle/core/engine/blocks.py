"""The block cache: refusals remembered in process, so that a blocked client
costs Redis nothing until it may pass again (see :doc:`/blocks`). It imports neither Flask nor Redis."""

from __future__ import annotations

import threading
from collections.abc import KeysView, Mapping
from dataclasses import dataclass

#: The longest an entry is trusted, in seconds, however long its block lasts.
MAX_AGE = 1.0
_MAX_AGE_US = round(MAX_AGE * 1_000_000)


@dataclass(frozen=True, slots=True)
class Block:
    """One remembered refusal of a ``cost`` (the only one refused from the cache)
    under a ``quota``, which had ``remaining`` left; times in microseconds on the cache's clock.

    :param until: when the request may pass.
    :param reset: when the counter is back to its full quota.
    :param expires: when the entry stops being trusted: ``until``, or :data:`MAX_AGE` after it was added if sooner.
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
        """The block of a refusal sent at ``sent`` whose reply gave ``retry`` and ``reset`` microseconds."""
        until = sent + retry
        return cls(quota, cost, remaining, until, sent + reset, min(until, sent + _MAX_AGE_US), penalized)


class BlockCache:
    """At most ``size`` counters known to be full: reads take no lock; adding
    does, and evicts the oldest entry (which only means asking Redis again)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a block cache holds at least one entry, not {size}")
        self.size = size
        self._blocks: dict[str, Block] = {}
        #: The blocks by ``<key>=<window>``, read only: every request tests it, faster than ``len()``.
        self.entries: Mapping[str, Block] = self._blocks
        self._counters: dict[str, int] = {}
        #: The keys that have an entry: one set test clears a request without naming its layers.
        self.blocked_keys: KeysView[str] = self._counters.keys()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._blocks)

    def find(self, layers: list[tuple[str, int]], cost: int, now: int) -> tuple[int, Block] | None:
        """The index in ``layers`` and block of the layer blocked for a request of ``cost`` with the longest wait
        at ``now`` (microseconds on the blocks' clock), if any.

        :param layers: the request's layers as ``(<key>=<window>, quota)``, in the order of the script's plan.
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
                # Redis decides again; drop only the block seen here, not another thread's newer one.
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
        """Forget every block (after counters were reset in Redis, say)."""
        with self._lock:
            self._blocks.clear()
            self._counters.clear()

    def _count(self, key: str, change: int) -> None:
        """Count an entry ``<key>=<window>`` in or out of its key's, under the lock."""
        counter = key[: key.rfind("=")] if "=" in key else key
        left = self._counters.get(counter, 0) + change
        if left:
            self._counters[counter] = left
        else:
            del self._counters[counter]
