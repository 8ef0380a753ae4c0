"""The core: decide a request against every layer of every identity in one call, without Flask
(see :doc:`/core`). :meth:`Throttle.hit` decides a request's checks, each a :class:`Policy` and
the identities it applies to, and returns its :class:`Decision`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import ParamSpec, TypeVar

import redis

from ..bounded import remember
from ..checks import is_integer, is_number
from ..errors import InvalidLimit
from ..storages.calls import Arg
from ..storages.local import LocalFolder, folder_of
from ..storages.storage import STORAGE_ERRORS, NodeFailure, NotSent, Storage
from .blocks import Block, BlockCache
from .breaker import CircuitBreaker
from .codec import LAYOUT_CACHE_SIZE, MAX_PLAN_DELAY, Layout, Reply, Times, entry, times_of
from .keys import Identity, counter_pattern, delete_counters, escape_scope, identity_tag, kept_counter_key
from .penalties import Penalty, penalty_suffix
from .rates import Layer
from .scripts import CONCURRENCY, PARTS, STRATEGY_NAMES, able, is_strategy
from .sending import Sender

__all__ = ["Check", "Decision", "Hold", "Policy", "StorageUnavailable", "Throttle", "UnexpectedError"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


@dataclass(frozen=True)
class Policy:
    """A limit ready to be sent, with the parts of its keys and plan that never change.

    :param layers: the layers; a request passes only if each has room.
    :param scope: the name counters are kept under, shared by its requests.
    :param strategy: the algorithm, a key of :data:`~flask_redis_throttle.core.engine.scripts.STRATEGIES`.
    :param penalty: refuses an identity that keeps hitting this limit for longer (see
        :ref:`penalties`); None for no penalty.
    :param delay: the longest a request over the rate may wait for its turn, in seconds, rather
        than be refused (the decision's ``retry_after``; see :doc:`/shaping`); 0 to refuse at once.
    :param burst: with a delay, how many requests may go at once after a quiet spell: 1 spreads
        them one every ``window / quota``; 0 lets the whole quota go at once.
    :raises InvalidLimit: for a delay or burst out of range, or on a strategy without it
        (:class:`~flask_redis_throttle.core.engine.scripts.Strategy`).
    """

    layers: tuple[Layer, ...]
    scope: str
    strategy: str = "fixed-window"
    penalty: Penalty | None = None
    delay: float = 0.0
    burst: int = 0
    #: ``}:<scope>:<strategy>``, the end of its keys.
    suffix: str = field(init=False, repr=False)
    #: Its entry in a script's plan.
    entry: bytes = field(init=False, repr=False)
    #: ``}:<scope>:pn``, the suffix of the penalty keys; empty without a penalty.
    penalty_suffix: str = field(init=False, repr=False)
    #: The script's strategies when this policy is a request's only one.
    strategies: frozenset[str] = field(init=False, repr=False)
    #: Worked out once: a dynamic limit's policies are looked up by value on every request.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not is_strategy(self.strategy) and self.strategy != CONCURRENCY.name:
            raise ValueError(f"unknown strategy {self.strategy!r}; expected one of {STRATEGY_NAMES}")
        code = PARTS[self.strategy].code
        penalty = self.penalty
        durations = None if penalty is None else (penalty.first, penalty.factor, penalty.longest)
        object.__setattr__(self, "suffix", f"}}:{escape_scope(self.scope)}:{code}")
        object.__setattr__(self, "entry", entry(code, self.layers, durations, self._shaping()))
        object.__setattr__(self, "penalty_suffix", "" if penalty is None else penalty_suffix(self.scope))
        object.__setattr__(self, "strategies", frozenset([self.strategy]))
        object.__setattr__(
            self, "_hash", hash((self.layers, self.scope, self.strategy, self.penalty, self.delay, self.burst))
        )

    def __hash__(self) -> int:
        return self._hash

    def _shaping(self) -> tuple[int, int] | None:
        """The plan's delay in milliseconds (at least one) and burst; None without a delay."""
        delay, burst = self.delay, self.burst
        if not is_number(delay) or not 0 <= delay <= MAX_PLAN_DELAY:
            raise InvalidLimit(
                f"delay {delay!r} must be a number of seconds from 0 to {MAX_PLAN_DELAY:.0f}", spec=delay
            )
        most = min((layer.quota for layer in self.layers), default=0)
        if not is_integer(burst) or not 0 <= burst <= most or (burst and not delay):
            raise InvalidLimit(f"burst {burst!r} must be from 1 to {most}, with a delay; or 0", spec=burst)
        if not delay:
            return None
        strategy = PARTS[self.strategy]
        if not strategy.delays:
            raise InvalidLimit(
                f"a delay needs the {able('delays')} strategy, not {self.strategy!r}: {strategy.no_delay}",
                spec=delay,
            )
        if burst and not strategy.bursts:
            raise InvalidLimit(f"burst {burst!r} needs the {able('bursts')} strategy: {strategy.no_burst}", spec=burst)
        return max(1, round(delay * 1000)), burst

    @classmethod
    def concurrency(cls, cap: int, lease: int, scope: str) -> Policy:
        """At most ``cap`` requests of an identity at once under ``scope``: each holds a slot, whatever
        its cost, until it gives it back (:meth:`Hold.release`), or ``lease`` seconds at most.

        :raises InvalidLimit: for a cap or a lease out of a layer's range.
        """
        return cls((Layer(cap, lease),), scope, CONCURRENCY.name)

    @property
    def concurrent(self) -> bool:
        """Whether this policy holds concurrency slots (see :meth:`concurrency`)."""
        return self.strategy == CONCURRENCY.name


#: One limit to check for a request: a policy and the identities it applies to.
Check = tuple[Policy, Sequence[Identity]]


class StorageUnavailable(Exception):
    """Redis could not decide: it is down, slow, full or refused the script (the original
    :class:`redis.RedisError` is the ``__cause__``).

    :param retry_in: seconds until the circuit breaker lets a call through again; 0 when it would now.
    """

    def __init__(self, message: str, retry_in: float = 0.0) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class UnexpectedError(StorageUnavailable):
    """The storage path raised an error that is not Redis's (a bug, or a dependency misbehaving),
    the ``__cause__``. A :class:`StorageUnavailable`, so that no request gets a 500; but no
    breaker counts it and no fallback decides it (see :ref:`internal-errors`)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one request.

    :param admitted: whether it passed (and was counted).
    :param policy: the policy of the deciding counter.
    :param layer: the deciding counter's layer: the one that refused, or, when admitted, the one
        with the least quota left.
    :param identity: the deciding counter's identity.
    :param remaining: the quota that counter has left.
    :param reset: seconds until that counter is back to its full quota.
    :param retry_after: seconds until the request would pass; when admitted, how long it must
        wait before it runs: 0 unless a delay reserved it a later turn (see :doc:`/shaping`).
    :param cached: whether the block cache refused it without asking Redis.
    :param penalized: whether it was refused because the identity serves a penalty.
    :param fallback: whether the in-process fallback decided it, Redis being unavailable.
    :param hold: what an admitted request holds, to give back; None for nothing.
    """

    admitted: bool
    policy: Policy
    layer: Layer
    identity: Identity
    remaining: int
    reset: float
    retry_after: float
    cached: bool = False
    penalized: bool = False
    fallback: bool = False
    hold: Hold | None = None


#: The strategies of a request's concurrency slots alone.
_SLOTS = frozenset([CONCURRENCY.name])


@dataclass(frozen=True, slots=True)
class Hold:
    """What one admitted request can give back: its concurrency slots, or, with
    ``hit(..., returnable=True)``, the whole request.

    :param throttle: the throttle that admitted it (perhaps the fallback's).
    :param keys: the keys to give back on, and ``plan`` their plan entries.
    :param now: when the request was admitted, in microseconds; None if unknown (no reply came).
    :param lease: the longest the slots are held, in seconds from ``now``.
    :param strategies: the strategies of those entries.
    :param cost: what the request took.
    :param wait: the wait the admission replied, in microseconds.
    :param token: the request's, by which the slots it took are found.
    :param times: on a cluster, when the request was admitted on several
        nodes: each node's time and wait, which its part is given back at
        (see :class:`~flask_redis_throttle.core.engine.codec.SplitReply`).
    """

    throttle: Throttle
    keys: tuple[str, ...]
    plan: bytes
    now: int | None
    lease: int = 0
    strategies: frozenset[str] = _SLOTS
    cost: int = 1
    wait: int = 0
    token: str = ""
    times: Times = ()

    def release(self, guarded: bool = True) -> None:
        """Give it back: one script call, a refund on the held keys alone. Giving back what a lease
        already freed changes nothing; giving back slots before their admission has run (it
        timed out, and runs late) makes it take none.

        :param guarded: whether the call goes through the circuit breakers; False for a call made
            in the background, which no request waits for.
        :raises StorageUnavailable: if the storage could not answer, or a breaker held the call back.
        :raises UnexpectedError: if it raised an error that is not Redis's.
        """
        throttle, keys = self.throttle, self.keys
        args: list[Arg] = ["" if self.now is None else self.now, -self.cost, self.plan]
        if self.wait or self.token or self.times:
            args.append(self.wait)
        if self.token:
            args.append(self.token)
        if guarded:
            throttle.call(throttle.sender.evaluate, keys, self.strategies, keys, args, self.times)
        else:
            throttle.unguarded(throttle.sender.evaluate, self.strategies, keys, args, self.times)


class Throttle:
    """Decides requests against a :class:`~flask_redis_throttle.core.storages.storage.Storage`, one round trip each.

    :param storage: where the counters live.
    :param prefix: put in front of every key; it must not contain braces.
    :param secret: keys the digest of identities in keys; empty for none.
    :param blocks: remembers refusals, to refuse a blocked client without asking Redis (see
        :class:`~flask_redis_throttle.core.engine.blocks.BlockCache`); None for no cache.
    :param breaker: stops calling a Redis that keeps failing (see
        :class:`~flask_redis_throttle.core.engine.breaker.CircuitBreaker`); None for none. On a
        cluster it guards finding the nodes, and each node gets one like it.
    :param fallback: decides requests while Redis is unavailable (a ``memory://`` throttle); None
        to raise :class:`StorageUnavailable`.
    """

    def __init__(
        self,
        storage: Storage,
        prefix: str = "rl:",
        secret: bytes = b"",
        blocks: BlockCache | None = None,
        breaker: CircuitBreaker | None = None,
        fallback: Throttle | None = None,
    ) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"key prefix {prefix!r} must not contain braces: they would pick the cluster slot")
        self.storage = storage
        self.sender = Sender(storage)
        self.prefix = prefix
        self.secret = secret
        self.blocks = blocks
        self.breaker = breaker
        self.fallback = fallback
        #: Told of the slots a failed admission may still take, to give back once the storage
        #: answers; None leaves them to their lease.
        self.strays: Callable[[Hold], object] | None = None
        self._head = prefix + "{"
        #: A cluster's breakers by node (``host:port``), made on first use.
        self._node_breakers: dict[str, CircuitBreaker] = {}
        #: The layout and strategies of each request shape (bounded: a dynamic limit makes policies).
        self._layouts: dict[tuple[bytes | int, ...], tuple[Layout, frozenset[str]]] = {}

    def now(self) -> int | None:
        """The time to decide at, in microseconds, or None for Redis ``TIME``: tests pin it."""
        return None

    def key(self, policy: Policy, identity: Identity) -> str:
        """The Redis key that holds every layer of ``identity`` under ``policy``."""
        return self._head + self.tag(identity) + policy.suffix

    def tag(self, identity: Identity) -> str:
        """``identity``'s hash tag: every key of it carries ``{<tag>}``."""
        return identity_tag(identity.kind, identity.value, self.secret)

    def keys_of(self, identity: Identity) -> str:
        """The glob that matches every key of ``identity``, for people to read."""
        return f"{self._head}{self.tag(identity)}}}:*"

    @property
    def url(self) -> str:
        """The storage's URL for messages and logs (``from_url`` hides its password)."""
        return self.storage.url

    @property
    def caches_refusals(self) -> bool:
        """Whether refusals are remembered in process (the block cache)."""
        return self.blocks is not None

    def local_folder(self) -> LocalFolder | None:
        """The folder of the ``local://`` server the storage runs on; None on any other storage."""
        return folder_of(self.storage.client)

    def reset(self, identity: Identity | None, scopes: Iterable[str | None] = (None,), beneath: bool = False) -> int:
        """Delete ``identity``'s counters and penalties (every identity's if None) in each of
        ``scopes`` (None for every scope; with ``beneath``, in every scope named ``scope:...``),
        and forget this process's cached refusals; other processes trust theirs up to a second more.

        :returns: how many keys were deleted.
        :raises redis.RedisError: if Redis cannot answer.
        """
        client, tag = self.storage.client, None if identity is None else self.tag(identity)
        deleted = sum(delete_counters(client, counter_pattern(self.prefix, tag, scope, beneath)) for scope in scopes)
        if self.blocks is not None:
            self.blocks.clear()
        return deleted

    def hit(self, checks: Sequence[Check], cost: int = 1, returnable: bool = False) -> Decision:
        """Check every layer of every identity of every check, in one script call, and count the
        request everywhere only if all have room.

        :param checks: the limits that apply (their strategies may differ), each with its
            identities, at least one identity between them.
        :param cost: how much quota the request takes; 0 only inspects.
        :param returnable: give an admitted request a :class:`Hold` of all it took; otherwise it
            holds only its concurrency slots, if any.
        :raises StorageUnavailable: if Redis could not answer (or the breaker is open) and there is
            no fallback.
        :raises UnexpectedError: if the storage path raised an error that is not Redis's.
        """
        keys, layout, strategies = self._prepare(checks)
        now = self.now()
        args: list[Arg] = ["" if now is None else now, cost, layout.plan]
        token = ""
        if layout.held and cost > 0:
            token = os.urandom(8).hex()
            args += (0, token)
        # Not a shaped request's: the next may get a turn before its retry.
        blocks = None if layout.shaped else self.blocks
        sent = time.monotonic_ns() // 1000 if now is None else now
        if blocks is not None and blocks.entries and cost > 0 and not blocks.blocked_keys.isdisjoint(keys):
            found = blocks.find(layout.layers(keys), cost, sent)
            if found is not None:
                index, block = found
                raw = Reply.refused(index, block.remaining, block.reset - sent, block.until - sent, block.penalized)
                return _decision(Reply.decode(raw), checks, layout, cached=True)
        try:
            raw = self.call(self.sender.evaluate, keys, strategies, keys, args)  # no closure: locals stay fast
        except StorageUnavailable as error:
            if token and self.strays is not None and _may_have_run(error):
                self.strays(self._hold(keys, layout, now, token))
            if self.fallback is None or isinstance(error, UnexpectedError):
                raise
            decision = self.fallback.hit(checks, cost, returnable)
            return replace(decision, fallback=True)
        reply = Reply.decode(raw)
        if reply.admitted:
            if returnable and cost > 0:
                whole = tuple(keys)
                hold = Hold(self, whole, layout.plan, reply.now, 0, strategies, cost, raw[4], token, times_of(raw))
                return _decision(reply, checks, layout, hold=hold)
            if token:
                hold = self._hold(keys, layout, reply.now, token, times_of(raw))
                return _decision(reply, checks, layout, hold=hold)
        elif blocks is not None and cost > 0 and reply.layer not in layout.slot_layers:
            # Redis ran the script at or after `sent`: the layer is full until at least `sent + retry`.
            # (Not a slot: one frees when a request ends.)
            layer, quota = layout.layers(keys)[reply.layer]
            blocks.add(layer, Block.after(sent, quota, cost, raw[2], raw[4], raw[3], reply.penalized))
        return _decision(reply, checks, layout)

    def _hold(self, keys: Sequence[str], layout: Layout, now: int | None, token: str, times: Times = ()) -> Hold:
        """The slots a request admitted at ``now`` (on a cluster, ``times``) with ``token`` holds."""
        held = tuple([keys[key] for key in layout.held])
        return Hold(self, held, layout.held_plan, now, layout.lease, token=token, times=times)

    def _prepare(self, checks: Sequence[Check]) -> tuple[list[str], Layout, frozenset[str]]:
        """A request's keys (the counters' in the plan's order, then the penalties'), its layout,
        kept by request shape, and its script's strategies."""
        head, secret = self._head, self.secret
        keys: list[str] = []
        shape: list[bytes | int] = []
        for policy, identities in checks:  # plain loops: a comprehension is one more call
            shape += (policy.entry, len(identities))
            for who in identities:
                keys.append(kept_counter_key(head, who.kind, who.value, secret, policy.suffix))
        known = self._layouts.get(tuple(shape))
        if known is None:
            layout = Layout.of((policy.entry, len(identities), policy.layers) for policy, identities in checks)
            strategies = checks[0][0].strategies if len(checks) == 1 else frozenset([p.strategy for p, _ in checks])
            known = remember(self._layouts, tuple(shape), (layout, strategies), LAYOUT_CACHE_SIZE)
        layout, strategies = known
        if layout.penalized:  # after every counter's key
            penalties = [(p.penalty_suffix, identities) for p, identities in checks if p.penalty_suffix]
            keys += [kept_counter_key(head, w.kind, w.value, secret, end) for end, ids in penalties for w in ids]
        return keys, layout, strategies

    def call(self, function: Callable[_P, _T], keys: Sequence[str] | None, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Make one Redis call that touches ``keys``, sending nothing while its breaker is open (on a
        cluster, each node's; None for the cluster's own, which guards finding the nodes). Only
        :data:`~flask_redis_throttle.core.storages.storage.STORAGE_ERRORS` count, on the failed nodes.

        :raises StorageUnavailable: if the call failed, or a breaker held it back.
        :raises UnexpectedError: if it raised an error that is not Redis's.
        """
        breaker = self.breaker
        if breaker is None:
            return self.unguarded(function, *args, **kwargs)
        breakers = {"": breaker}
        if keys is not None and self.storage.cluster:
            # Finding the nodes may ask for the slot map: through the cluster's own breaker, so that
            # an unreachable cluster is not asked on every request.
            known = self._node_breakers
            nodes = self.call(self.storage.nodes, None, keys)
            breakers = {node: known.get(node) or known.setdefault(node, breaker.like(node)) for node in nodes}
        allowed: list[CircuitBreaker] = []
        for node, guard in breakers.items():
            if not guard.allow():
                for other in allowed:
                    other.abandon()
                where, retry_in = f"{self.storage.url}{' node ' + node if node else ''}", guard.retry_in()
                raise StorageUnavailable(f"{where}: not called for {retry_in:.1f} s more (circuit open)", retry_in)
            allowed.append(guard)
        try:
            result = function(*args, **kwargs)
        except STORAGE_ERRORS as error:
            _settle(breakers, error)
            retry_in = max(guard.retry_in() for guard in breakers.values())
            raise StorageUnavailable(self._failed(error), retry_in) from error
        except Exception as error:
            raise self.unexpected(error, allowed) from error
        for guard in allowed:
            guard.success()
        return result

    def unguarded(self, function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """:meth:`call` past the breakers, telling them nothing: for a call no request waits for (a
        slot's release retried, an operator's write).

        :raises StorageUnavailable: if the call failed.
        :raises UnexpectedError: if it raised an error that is not Redis's.
        """
        try:
            return function(*args, **kwargs)
        except STORAGE_ERRORS as error:
            raise StorageUnavailable(self._failed(error)) from error
        except Exception as error:
            raise self.unexpected(error) from error

    def _failed(self, error: Exception) -> str:
        return f"{self.storage.url}: {error}"

    def unexpected(self, error: Exception, breakers: Iterable[CircuitBreaker] = ()) -> UnexpectedError:
        """The :class:`UnexpectedError` caused by ``error``; a probe of ``breakers`` is given back."""
        for guard in breakers:
            guard.abandon()
        failure = UnexpectedError(f"{self.storage.url}: unexpected {type(error).__name__}: {error}")
        failure.__cause__ = error
        return failure


def _settle(breakers: dict[str, CircuitBreaker], error: Exception) -> None:
    """Tell each node's breaker how a failed call went on it."""
    if not isinstance(error, NodeFailure):
        for guard in breakers.values():
            guard.failure()
        return
    for node, guard in breakers.items():
        if node in error.nodes:
            guard.failure()
        elif node in error.answered:
            guard.success()
        else:
            guard.abandon()


def _may_have_run(error: StorageUnavailable) -> bool:
    """Whether the call that failed may have run, or still run: sent with no reply, or a cluster
    node answered its part."""
    cause = error.__cause__
    while cause is not None:
        if isinstance(cause, NotSent):
            return False
        if isinstance(cause, (redis.TimeoutError, redis.ConnectionError)):
            return True
        if isinstance(cause, NodeFailure) and cause.answered:
            return True
        cause = cause.__cause__
    return False


def _decision(
    reply: Reply, checks: Sequence[Check], layout: Layout, cached: bool = False, hold: Hold | None = None
) -> Decision:
    """``reply`` with its deciding counter's policy, identity and layer."""
    number, who, n = layout.places[reply.layer]
    policy, identities = checks[number]
    admitted, _, left, reset, retry, _, penalized = reply
    return Decision(
        admitted, policy, policy.layers[n], identities[who], left, reset, retry, cached, penalized, False, hold
    )
