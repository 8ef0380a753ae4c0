"""Quota leases: a worker takes a block of quota in one script call (a hit
of cost ``n``) and spends it in process until its window ends (see docs/leases.rst)."""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .scripts import PARTS
from .throttle import Check, Decision, Hold, StorageUnavailable, Throttle

LEASABLE = frozenset(name for name, strategy in PARTS.items() if strategy.leases)

#: A block is what the worker asked for over the last ``HORIZON`` seconds.
HORIZON = 0.1

#: A block is at most ``1 / SHARE`` of the quota the last reply left.
SHARE = 8

#: How many request shapes a :class:`Leases` keeps blocks for.
LEASE_TABLE_SIZE = 10_000


@dataclass(slots=True)
class _Lease:
    """A request shape's units counted in Redis and not yet spent, until ``until`` (the first end of
    a window of its layers, on the lease clock); ``decision`` took it, and gives its units' headers."""

    units: int
    until: int
    taken: int
    decision: Decision
    hold: Hold | None
    asked: int = 0


class Leases:
    """Decides requests on ``throttle`` (whose pinned clock, if any, is the lease clock) from
    blocks of quota taken in advance, for at most ``size`` request shapes. One per worker and
    throttle; thread-safe."""

    def __init__(self, throttle: Throttle, horizon: float = HORIZON, size: int = LEASE_TABLE_SIZE) -> None:
        self.throttle = throttle
        self.horizon = horizon
        self.size = size
        self._leases: dict[tuple[object, ...], _Lease] = {}
        self._lock = threading.Lock()
        #: Script calls made, for the benchmark and tests.
        self.calls = 0
        _LIVE.add(self)

    def _clock(self) -> int:
        now = self.throttle.now()
        return time.monotonic_ns() // 1000 if now is None else now

    def hit(self, checks: Sequence[Check], cost: int = 1) -> Decision:
        """Decide a request of ``cost`` from the block its shape holds, or take a new block in
        one script call. One that cannot lease (a penalty's), or of cost 0, is decided by the throttle.

        :raises StorageUnavailable: once the block in hand is spent.
        """
        if cost <= 0 or not all(each.strategy in LEASABLE and each.penalty is None for each, _ in checks):
            return self.throttle.hit(checks, cost)
        shape = tuple((policy, tuple(identities)) for policy, identities in checks)
        now = self._clock()
        with self._lock:
            lease = self._leases.get(shape)
            if lease is not None:
                lease.asked += cost
                if now < lease.until and lease.units >= cost:
                    lease.units -= cost
                    decision, waited = lease.decision, (now - lease.taken) / 1e6
                    reset = max(decision.reset - waited, 0.0)
                    return replace(decision, remaining=decision.remaining + lease.units, reset=reset, hold=None)
            size = cost if lease is None else self._size(lease, now, cost, checks)
        return self._take(shape, checks, cost, size, now)

    def _size(self, lease: _Lease, now: int, cost: int, checks: Sequence[Check]) -> int:
        """The next block's size (see :ref:`lease-bound`)."""
        asked = lease.asked
        elapsed = max(now - lease.taken, 1) / 1e6
        if now < lease.until:
            left, remaining = min(self.horizon, (lease.until - now) / 1e6), lease.decision.remaining
        else:
            left, remaining = self.horizon, min(layer.quota for policy, _ in checks for layer in policy.layers)
        size = min(math.ceil(asked / elapsed * left), 2 * asked, remaining // SHARE)
        return max(cost, size)

    def _take(self, shape: tuple[object, ...], checks: Sequence[Check], cost: int, size: int, now: int) -> Decision:
        decision = self.throttle.hit(checks, size, returnable=True)
        self.calls += not decision.cached
        if not decision.admitted and size > cost:
            decision = self.throttle.hit(checks, cost, returnable=True)
            self.calls += not decision.cached
            size = cost
        if not decision.admitted:
            self._refused(shape, decision, now)
            return decision
        if decision.fallback:
            # No block from the fallback, spent on once Redis is back: the rest goes back now.
            if size > cost and decision.hold is not None:
                replace(decision.hold, cost=size - cost).release(guarded=False)
            return replace(decision, hold=None)
        # Spent by the first end of a window of its layers, from the script's time (never
        # before the lease clock's when sent); on a cluster, the node's whose window ends first.
        hold = decision.hold
        assert hold is not None
        assert hold.now is not None
        at = hold.now
        windows = [layer.window * 1_000_000 for policy, _ in checks for layer in policy.layers]
        until = now + min(window - at % window for window in windows)
        lease = _Lease(size - cost, until, now, decision, decision.hold)
        with self._lock:
            leases = self._leases
            old = leases.get(shape)
            if old is not None and old.until == until:
                lease.units += old.units  # another thread's block of the same window
            elif old is None and len(leases) >= self.size:
                leases = self._leases = {key: kept for key, kept in leases.items() if kept.units and now < kept.until}
                if len(leases) >= self.size:
                    leases.clear()
            leases[shape] = lease
        return replace(decision, remaining=decision.remaining + lease.units, hold=None)

    def _refused(self, shape: tuple[object, ...], refusal: Decision, now: int) -> None:
        """Size ``shape``'s next blocks by the quota ``refusal`` left until the counter resets."""
        with self._lock:
            lease = self._leases.get(shape)
            if lease is None:
                return
            if now < lease.until:
                lease.decision = replace(lease.decision, remaining=min(lease.decision.remaining, refusal.remaining))
                return
            # No units until the counter resets; the rate seen still sizes the block after it.
            until = now + max(round(refusal.reset * 1_000_000), 1)
            self._leases[shape] = _Lease(0, until, lease.taken, refusal, None, lease.asked)

    def give_back(self) -> int:
        """Refund every unspent unit of a block whose window has not ended, one script call each
        past the breakers, forget the blocks, and return the units given back. The first refund
        Redis does not answer ends it: each other would wait as long for a stalled server."""
        now = self._clock()
        with self._lock:
            leases, self._leases = list(self._leases.values()), {}
        given = 0
        for lease in leases:
            if lease.units and lease.hold is not None and now < lease.until:
                try:
                    replace(lease.hold, cost=lease.units).release(guarded=False)
                except StorageUnavailable:
                    break
                given += lease.units
        return given


#: Every live lease table, to give back at exit.
_LIVE: weakref.WeakSet[Leases] = weakref.WeakSet()


@atexit.register
def _give_back_all() -> None:
    for leases in list(_LIVE):
        leases.give_back()


def _forget_in_child() -> None:
    """In a forked child (``gunicorn --preload``), forget the parent's blocks (each child would
    spend them again) and lock (another thread may have held it at the fork)."""
    for leases in list(_LIVE):
        leases._leases = {}
        leases._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, where no process forks
    os.register_at_fork(after_in_child=_forget_in_child)
