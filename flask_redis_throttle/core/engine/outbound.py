"""Outbound limits: calls to a third party wait for their turn under its quota, reserved in
one script call (``lua/shaping.lua``) and shared by every process on the storage (see :ref:`outbound`)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, ParamSpec, TypeVar, cast

from ..checks import is_integer, is_number
from ..errors import InvalidLimit
from .codec import MAX_PLAN_DELAY
from .keys import Identity
from .rates import Layer, parse_limits
from .throttle import Decision, Hold, Policy, StorageUnavailable, Throttle

__all__ = ["QuotaTimeout", "SharedQuota", "acquire", "acquire_async", "quota_policies", "reserve"]

_T = TypeVar("_T")
_P = ParamSpec("_P")

logger = logging.getLogger("flask_redis_throttle")

#: What a turn is reserved under: one policy, or several decided together.
Policies = Policy | Sequence[Policy]


class QuotaTimeout(Exception):
    """The quota ``scope`` has no turn within ``timeout`` seconds, and nothing was used;
    ``retry_after`` is the seconds until a call would get its turn at once."""

    def __init__(self, scope: str, timeout: float, retry_after: float) -> None:
        super().__init__(
            f"no turn under the quota {scope!r} within {timeout:g} s: the next free turn is {retry_after:.3f} s away"
        )
        self.scope = scope
        self.timeout = timeout
        self.retry_after = retry_after


def quota_policies(layers: Sequence[Layer], scope: str, burst: int = 1) -> tuple[Policy, Policy]:
    """The two policies of a quota of ``layers``: those of the shortest window, by GCRA with
    ``burst``, which set the pace; and every layer as a sliding log, which caps each window's total.

    :raises ~flask_redis_throttle.core.errors.InvalidLimit: for no layers, or a burst out of 1 to
        the quota of the pace's layers.
    """
    if not layers:
        raise InvalidLimit("a quota needs at least one layer, such as 10/s", spec=layers)
    shortest = min(layer.window for layer in layers)
    pace = tuple(layer for layer in layers if layer.window == shortest)
    # A placeholder delay: each call sends its timeout instead (see _delayed).
    return (
        Policy(pace, scope, "gcra", delay=MAX_PLAN_DELAY, burst=burst),
        Policy(tuple(layers), scope, "sliding-log", delay=MAX_PLAN_DELAY),
    )


def _wait_bound(timeout: float | None) -> float:
    """The plan's delay for ``timeout``: at least a millisecond; a ValueError out of range."""
    if timeout is None:
        return MAX_PLAN_DELAY
    if not is_number(timeout) or not 0 <= timeout <= MAX_PLAN_DELAY:
        raise ValueError(
            f"timeout {timeout!r} must be a number of seconds from 0 to {MAX_PLAN_DELAY:.0f}, "
            "or None to wait as long as it takes"
        )
    return max(timeout, 0.001)


@functools.lru_cache(maxsize=64)
def _delayed(policies: tuple[Policy, ...], bound: float) -> tuple[Policy, ...]:
    """Kept: a policy encodes its plan when made."""
    return tuple(replace(each, delay=bound) for each in policies)


def _take(
    throttle: Throttle, policy: Policies, identity: Identity, cost: int = 1, timeout: float | None = None
) -> Decision:
    """:func:`reserve`'s admitted decision, whose hold gives the turn back."""
    policies = (policy,) if isinstance(policy, Policy) else tuple(policy)
    if not policies:
        raise ValueError("no policy to reserve a turn under")
    scope = policies[0].scope
    if not is_integer(cost) or cost < 1:
        raise ValueError(f"cost {cost!r} must be a whole number of 1 or more")
    most = min(each.burst or min(layer.quota for layer in each.layers) for each in policies)
    if cost > most:
        raise ValueError(f"cost {cost} is more than {scope!r} lets go at once ({most}): it would never get a turn")
    bound = _wait_bound(timeout)
    decision = throttle.hit([(each, (identity,)) for each in _delayed(policies, bound)], cost, returnable=True)
    if not decision.admitted:
        raise QuotaTimeout(scope, bound, decision.retry_after)
    return decision


def reserve(
    throttle: Throttle, policy: Policies, identity: Identity, cost: int = 1, timeout: float | None = None
) -> float:
    """Reserve the next turn of ``identity`` under ``policy`` (as :func:`quota_policies` makes;
    ``timeout`` replaces their delay), taking ``cost``, in one script call, and return how many
    seconds away it is: the caller waits that long. A turn reserved here cannot be given back.

    :param timeout: the longest wait to accept, in seconds, rounded to a
        millisecond; None for any (up to ``MAX_PLAN_DELAY``).
    :raises QuotaTimeout: if the turn is further off than ``timeout``.
    :raises ValueError: for a ``cost`` not a whole number from 1 to the burst (or a layer's
        quota), or a bad ``timeout``.
    :raises ~flask_redis_throttle.core.engine.throttle.StorageUnavailable: if Redis could not answer.
    """
    return _take(throttle, policy, identity, cost, timeout).retry_after


def give_back(hold: Hold | None) -> None:
    """Give back an unused turn; one the storage cannot take back is lost, with a warning."""
    try:
        if hold is not None:
            hold.release()
    except StorageUnavailable as error:
        logger.warning("could not give back a turn of an outbound quota (%s): it is lost", error)


def acquire(
    throttle: Throttle, policy: Policies, identity: Identity, cost: int = 1, timeout: float | None = None
) -> float:
    """Wait for the next turn (see :func:`reserve`), sleeping once, and return the seconds waited.
    A wait interrupted by any exception (``KeyboardInterrupt``) gives the turn back first."""
    decision = _take(throttle, policy, identity, cost, timeout)
    wait = decision.retry_after
    if wait > 0:
        try:
            time.sleep(wait)
        except BaseException:
            give_back(decision.hold)
            raise
    return wait


async def acquire_async(
    throttle: Throttle, policy: Policies, identity: Identity, cost: int = 1, timeout: float | None = None
) -> float:
    """:func:`acquire` for ``asyncio``: the script call runs in a worker thread, the wait is an
    ``asyncio.sleep``. A cancelled wait gives its turn back (once the script answers, if during it)."""
    reservation = _Reservation()
    try:
        decision = await asyncio.to_thread(
            reservation.take, functools.partial(_take, throttle, policy, identity, cost, timeout)
        )
    except asyncio.CancelledError:
        taken = reservation.abandon()
        if taken is not None:
            await asyncio.shield(asyncio.to_thread(give_back, taken.hold))
        raise
    wait = decision.retry_after
    if wait > 0:
        try:
            await asyncio.sleep(wait)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(give_back, decision.hold))
            raise
    return wait


class _Reservation:
    """A turn reserved in a worker thread for a caller that may be cancelled meanwhile:
    whichever learns last that it is not used gives it back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decision: Decision | None = None
        self._abandoned = False

    def take(self, reserve: Callable[[], Decision]) -> Decision:
        decision = reserve()
        with self._lock:
            if not self._abandoned:
                self._decision = decision
                return decision
        give_back(decision.hold)
        return decision

    def abandon(self) -> Decision | None:
        """The caller was cancelled: the turn to give back, if reserved."""
        with self._lock:
            self._abandoned = True
            return self._decision


class SharedQuota:
    """A third party's quota, shared by every process on the same storage: a context manager
    (``with``, ``async with``) and a decorator whose calls each wait for their turn (see :ref:`outbound`).

    :param throttle: decides the turns; its storage is what is shared.
    :param limit: the quota, such as ``"10/s;2000/d"`` (see :doc:`/grammar`), or its layers.
    :param scope: names the quota in the keys: every ``SharedQuota`` with the same scope and
        identity shares it.
    :param identity: whose quota it is, when the third party grants one per account.
    :param timeout: the longest a call waits, in seconds (past it, :class:`QuotaTimeout`); None for any.
    :param burst: how many calls may go at once after a quiet spell; 1 spreads them evenly.
    :raises ~flask_redis_throttle.core.errors.InvalidLimit: for a malformed limit, or a burst out
        of 1 to the quota of the shortest window.
    :raises ValueError: for a timeout not None or seconds from 0 to ``MAX_PLAN_DELAY``.
    """

    def __init__(
        self,
        throttle: Throttle,
        limit: str | Sequence[Layer],
        scope: str,
        identity: str = "default",
        timeout: float | None = None,
        burst: int = 1,
    ) -> None:
        layers = parse_limits(limit) if isinstance(limit, str) else tuple(limit)
        self.throttle = throttle
        self.policies = quota_policies(layers, scope, burst)
        self.identity = Identity("outbound", identity)
        _wait_bound(timeout)  # fails here, not at the first call
        self.timeout = timeout

    def acquire(self, cost: int = 1, timeout: float | None = None) -> float:
        """Wait for a turn (see :func:`acquire`); ``timeout`` overrides the quota's."""
        return acquire(self.throttle, self.policies, self.identity, cost, self._timeout(timeout))

    async def acquire_async(self, cost: int = 1, timeout: float | None = None) -> float:
        """Wait for a turn without blocking the event loop (see :func:`acquire_async`)."""
        return await acquire_async(self.throttle, self.policies, self.identity, cost, self._timeout(timeout))

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout

    def __enter__(self) -> SharedQuota:
        self.acquire()
        return self

    def __exit__(self, *exception: object) -> None:
        return None

    async def __aenter__(self) -> SharedQuota:
        await self.acquire_async()
        return self

    async def __aexit__(self, *exception: object) -> None:
        return None

    def __call__(self, function: Callable[_P, _T]) -> Callable[_P, _T]:
        """Make each call of ``function`` wait for its turn first."""
        if inspect.iscoroutinefunction(function):
            run = cast(Callable[_P, Awaitable[Any]], function)

            @functools.wraps(function)
            async def waiting(*args: _P.args, **kwargs: _P.kwargs) -> Any:
                await self.acquire_async()
                return await run(*args, **kwargs)

            return cast(Callable[_P, _T], waiting)

        @functools.wraps(function)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            self.acquire()
            return function(*args, **kwargs)

        return wrapper
