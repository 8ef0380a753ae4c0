"""The core: decide a request against every layer of every identity in one
call. It works without Flask; docs/core.rst shows it on its own.

A :class:`Policy` is a limit ready to be sent; a :data:`Check`, one limit of
a request with the identities it applies to; :meth:`Throttle.hit` decides a
request's checks in one script call, and returns its :class:`Decision`.
"""

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
from .codec import LAYOUT_CACHE_SIZE, MAX_PLAN_DELAY, Layout, Reply, entry
from .keys import Identity, counter_pattern, delete_counters, escape_scope, identity_tag, kept_counter_key
from .penalties import Penalty, penalty_suffix
from .rates import Layer
from .scripts import CONCURRENCY, PARTS, STRATEGY_NAMES, able, is_strategy
from .sending import Sender

__all__ = [
    "Check",
    "Decision",
    "Hold",
    "Policy",
    "StorageUnavailable",
    "Throttle",
    "UnexpectedError",
]

_T = TypeVar("_T")
_P = ParamSpec("_P")


@dataclass(frozen=True)
class Policy:
    """A limit ready to be sent: its layers, scope and strategy, and the parts
    of its keys and script arguments that never change between requests.

    :param layers: the layers; a request passes only if each has room.
    :param scope: the name counters are kept under; requests in the same scope
        share counters. By default the Flask layer uses the endpoint.
    :param strategy: the algorithm, a key of
        :data:`~flask_redis_throttle.core.engine.scripts.STRATEGIES`.
    :param penalty: refuses an identity that keeps hitting this limit for longer (see
        :mod:`flask_redis_throttle.core.engine.penalties`); None for no penalty.
    :param delay: shaping: the longest a request over the rate may wait for
        its turn, in seconds, rather than be refused; 0 to refuse at once.
        The script reserves the turn, and the decision's ``retry_after`` is
        the wait (see :doc:`/shaping`). Only a strategy whose record
        :attr:`~flask_redis_throttle.core.engine.scripts.Strategy.delays` has a
        delay: ``"gcra"`` and ``"sliding-log"``.
    :param burst: with a delay, how many requests may go at once after a
        quiet spell: 1 spreads them one every ``window / quota``, never
        more than the quota in any span of the window; 0 lets the whole
        quota go at once, as GCRA does without a delay. Only a strategy
        whose record :attr:`~flask_redis_throttle.core.engine.scripts.Strategy.bursts`
        has a burst: ``"gcra"``; the sliding log always lets the whole
        quota go.

    A policy of concurrency slots, made by :meth:`concurrency`, caps how
    many of an identity's requests run at once instead.
    """

    layers: tuple[Layer, ...]
    scope: str
    strategy: str = "fixed-window"
    penalty: Penalty | None = None
    delay: float = 0.0
    burst: int = 0
    #: ``}:<scope>:<strategy>``: a key is the prefix, ``{``, an identity's
    #: tag and this. One key holds every layer of the identity under the
    #: scope and strategy (see ``lua/records.lua``).
    suffix: str = field(init=False, repr=False)
    #: The policy's entry in a script's plan, the same for every identity
    #: (see :func:`~flask_redis_throttle.core.engine.codec.entry`).
    entry: bytes = field(init=False, repr=False)
    #: ``}:<scope>:pn``, the suffix of the penalty keys; empty without a penalty.
    penalty_suffix: str = field(init=False, repr=False)
    #: The script's strategies when this policy is a request's only one.
    strategies: frozenset[str] = field(init=False, repr=False)
    #: The hash of what it is made of, worked out once: a dynamic limit's
    #: policies are looked up by value on every request.
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
        """The plan's shaping of this policy: its delay in whole milliseconds
        (at least one) and its burst; None without a delay.

        :raises InvalidLimit: for a delay that is not a number of seconds
            from 0 to :data:`~flask_redis_throttle.core.engine.codec.MAX_PLAN_DELAY`,
            one on a strategy that has none, or a burst without a delay,
            past the least quota or on a strategy that has none (see
            :class:`~flask_redis_throttle.core.engine.scripts.Strategy`).
        """
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
        """At most ``cap`` requests of an identity at once under ``scope``:
        each holds a slot from its admission until it gives it back
        (:meth:`Hold.release`), or at most ``lease`` seconds. Its one layer
        is ``cap`` per ``lease``; a request takes one slot whatever its cost.

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
    """Redis could not decide: it is down, slow, full or refused the script.

    The original :class:`redis.RedisError` is the ``__cause__``.

    :param retry_in: seconds until the circuit breaker lets a call through
        again; 0 when it would now (or there is none).
    """

    def __init__(self, message: str, retry_in: float = 0.0) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class UnexpectedError(StorageUnavailable):
    """The storage path raised an error that is not Redis's: a bug in this
    package, or a dependency misbehaving (a client built with a bad option
    that raises :class:`TypeError` on every call, say).

    It is a :class:`StorageUnavailable`, so that whoever answers an
    unavailable Redis answers it too and no request gets a 500; but it is
    not an outage: no circuit breaker counts it, no fallback decides it, and
    the Flask layer logs it as an error (see :ref:`internal-errors`). The
    original exception is the ``__cause__``.
    """


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one request.

    :param admitted: whether it passed (and was counted).
    :param policy: the policy of the deciding counter.
    :param layer: the deciding counter's layer: the one that refused the
        request, or, when admitted, the one with the least quota left.
    :param identity: the deciding counter's identity.
    :param remaining: the quota that counter has left.
    :param reset: seconds until that counter is back to its full quota.
    :param retry_after: seconds until the request would pass; when
        admitted, how long it must wait before it runs: 0 unless a policy
        with a delay reserved it a later turn (see :doc:`/shaping`).
    :param cached: True if the block cache refused it without asking Redis.
    :param penalized: True if it was refused because the identity serves a
        penalty of the policy.
    :param fallback: True if Redis was unavailable and the in-process
        fallback store decided it.
    :param hold: the concurrency slots an admitted request holds, to give
        back when it ends; None when it holds none.
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
    """What one admitted request holds and can give back: its concurrency
    slots (see :meth:`Policy.concurrency`), or, asked for with
    ``hit(..., returnable=True)``, the whole request, such as a turn
    reserved by a policy with a delay that the caller no longer wants
    (see :mod:`flask_redis_throttle.core.engine.outbound`).

    :param throttle: the throttle that admitted it (the fallback's, when
        the fallback did).
    :param keys: the keys to give back on.
    :param plan: their plan entries.
    :param now: the time the request was admitted at, in microseconds;
        None when it is not known (an admission that got no reply): the
        storage's clock when the slots are given back.
    :param lease: the longest the slots are held, in seconds from ``now``:
        once it has passed, they are free whether given back or not.
    :param strategies: the strategies of those entries.
    :param cost: what the request took.
    :param wait: the wait the admission replied, in microseconds: a
        sliding log with a delay stamped the request's entries then.
    :param token: the request's, sent with its admission, by which the
        slots it took are found (see ``lua/concurrency.lua``).
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

    def release(self, guarded: bool = True) -> None:
        """Give it back: one script call, a refund of the request on the
        held keys alone (its slots found by its token). Giving back slots
        that their leases have already freed, or a turn long past, changes
        nothing; giving back slots before the admission that takes them has
        run (it timed out, and the storage runs it late) makes it take none.

        :param guarded: whether the call goes through the circuit breakers,
            as a request's do (see :meth:`Throttle.call`); False sends it
            whatever they say, and tells them nothing: for a call made in
            the background, which no request waits for.
        :raises StorageUnavailable: if the storage could not answer, or a
            breaker held the call back.
        :raises UnexpectedError: if it raised an error that is not Redis's.
        """
        throttle, keys = self.throttle, self.keys
        args: list[Arg] = ["" if self.now is None else self.now, -self.cost, self.plan]
        if self.wait or self.token:
            args.append(self.wait)
        if self.token:
            args.append(self.token)
        if guarded:
            throttle.call(throttle.sender.evaluate, keys, self.strategies, keys, args)
        else:
            throttle.unguarded(throttle.sender.evaluate, self.strategies, keys, args)


class Throttle:
    """Decides requests against a :class:`~flask_redis_throttle.core.storages.storage.Storage`, one round trip each.

    :param storage: where the counters live.
    :param prefix: put in front of every key; it must not contain braces.
    :param secret: keys the digest of identities in keys (see
        :func:`~flask_redis_throttle.core.engine.keys.identity_tag`); empty for none.
    :param blocks: remembers refusals, so that a blocked client's further
        requests are refused without asking Redis (see
        :class:`~flask_redis_throttle.core.engine.blocks.BlockCache`); None for no cache.
    :param breaker: stops calling a Redis that keeps failing (see
        :class:`~flask_redis_throttle.core.engine.breaker.CircuitBreaker`); None to call
        it on every request. On a cluster it guards finding the nodes, and
        each node gets a breaker like it of its own, so that a dead node
        does not stop the others from deciding.
    :param fallback: decides requests while Redis is unavailable, typically
        a throttle on an embedded ``memory://`` storage; None to raise
        :class:`StorageUnavailable` instead.
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
        #: Sends the scripts on ``storage`` (see :class:`~flask_redis_throttle.core.engine.sending.Sender`).
        self.sender = Sender(storage)
        self.prefix = prefix
        self.secret = secret
        self.blocks = blocks
        self.breaker = breaker
        self.fallback = fallback
        #: Told of the slots an admission may still take though it failed
        #: (it timed out, or its connection was lost: the storage may run it
        #: once it answers), to give back once the storage answers (the
        #: Flask layer's :class:`~flask_redis_throttle._request.releases.Releases`
        #: does); None leaves them to their lease.
        self.strays: Callable[[Hold], object] | None = None
        self._head = prefix + "{"
        #: A cluster's breakers by node (``host:port``), made on first use.
        self._node_breakers: dict[str, CircuitBreaker] = {}
        #: The layout and strategies of each request shape: its policies'
        #: plan entries, and how many identities each has (bounded, since a
        #: dynamic limit makes policies).
        self._layouts: dict[tuple[bytes | int, ...], tuple[Layout, frozenset[str]]] = {}

    def now(self) -> int | None:
        """The time to decide at, in microseconds, or None for Redis ``TIME``.

        Production always uses Redis's clock. Tests override this method to
        pin time, the way itsdangerous lets tests override ``get_timestamp``.
        """
        return None

    def key(self, policy: Policy, identity: Identity) -> str:
        """The Redis key that holds every layer of ``identity`` under ``policy``."""
        return self._head + self.tag(identity) + policy.suffix

    def tag(self, identity: Identity) -> str:
        """``identity``'s hash tag in keys: every key of it carries ``{<tag>}``."""
        return identity_tag(identity.kind, identity.value, self.secret)

    def keys_of(self, identity: Identity) -> str:
        """The glob that matches every key of ``identity``, for people to read."""
        return f"{self._head}{self.tag(identity)}}}:*"

    @property
    def url(self) -> str:
        """The storage's URL, as given (with any password: redact it to show it)."""
        return self.storage.url

    @property
    def caches_refusals(self) -> bool:
        """Whether refusals are remembered in process (the block cache)."""
        return self.blocks is not None

    def local_folder(self) -> LocalFolder | None:
        """The folder of the ``local://`` server the storage runs on; None on any other storage."""
        return folder_of(self.storage.client)

    def reset(self, identity: Identity | None, scopes: Iterable[str | None] = (None,), beneath: bool = False) -> int:
        """Delete ``identity``'s counters (and penalties; every identity's if
        None) in each of ``scopes`` (None for every scope; with ``beneath``,
        in every scope named ``scope:...`` instead), and forget this
        process's cached refusals.

        Other processes' block caches trust a refusal for up to a second more
        (see :mod:`flask_redis_throttle.core.engine.blocks`).

        :returns: how many keys were deleted.
        :raises redis.RedisError: if Redis cannot answer.
        """
        client, tag = self.storage.client, None if identity is None else self.tag(identity)
        deleted = sum(delete_counters(client, counter_pattern(self.prefix, tag, scope, beneath)) for scope in scopes)
        if self.blocks is not None:
            self.blocks.clear()
        return deleted

    def hit(self, checks: Sequence[Check], cost: int = 1, returnable: bool = False) -> Decision:
        """Check every layer of every identity of every check, in one script
        call, and count the request everywhere only if all have room.

        :param checks: the limits that apply, each with its identities, at
            least one identity between them. Their strategies may differ.
        :param cost: how much quota the request takes; 0 only inspects.
        :param returnable: give an admitted request a :class:`Hold` of all
            it took, which gives it back when released (a reserved turn that
            the caller gave up on, say); otherwise it holds only its
            concurrency slots, if any.
        :raises StorageUnavailable: if Redis could not answer (or the breaker
            is open) and there is no fallback.
        :raises UnexpectedError: if the storage path raised an error that is
            not Redis's, fallback or not: a bug is not an outage.
        """
        keys, layout, strategies = self._prepare(checks)
        now = self.now()
        args: list[Arg] = ["" if now is None else now, cost, layout.plan]
        token = ""
        if layout.held and cost > 0:
            # The slots' token: what gives them back finds them by it.
            token = os.urandom(8).hex()
            args += (0, token)
        # A refusal of a shaped request is not remembered: the request
        # after it may be given a turn before the refusal's retry is over.
        blocks = None if layout.shaped else self.blocks
        # The block cache's clock, in microseconds: this process's
        # monotonic clock, or the pinned time when tests pin it.
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
                hold = Hold(
                    self,
                    tuple(keys),
                    layout.plan,
                    reply.now,
                    strategies=strategies,
                    cost=cost,
                    wait=raw[4],
                    token=token,
                )
                return _decision(reply, checks, layout, hold=hold)
            if token:
                return _decision(reply, checks, layout, hold=self._hold(keys, layout, reply.now, token))
        elif blocks is not None and cost > 0 and reply.layer not in layout.slot_layers:
            # Redis ran the script at or after `sent`, so the layer is full
            # until at least `sent + retry_after`. (Not a slot: one frees
            # whenever a request ends.)
            layer, quota = layout.layers(keys)[reply.layer]
            blocks.add(layer, Block.after(sent, quota, cost, raw[2], raw[4], raw[3], reply.penalized))
        return _decision(reply, checks, layout)

    def _hold(self, keys: Sequence[str], layout: Layout, now: int | None, token: str) -> Hold:
        """The slots a request with ``keys`` under ``layout``, admitted at
        ``now`` with ``token``, holds."""
        return Hold(self, tuple([keys[key] for key in layout.held]), layout.held_plan, now, layout.lease, token=token)

    def _prepare(self, checks: Sequence[Check]) -> tuple[list[str], Layout, frozenset[str]]:
        """A request's script call but for its time and cost: every
        counter's key, in the plan's order, then the penalty keys of the
        policies that have a penalty; the plan and reply layout; and the
        strategies of the script it takes.

        Keys come from the bounded key cache (see
        :func:`~flask_redis_throttle.core.engine.keys.kept_counter_key`); the layout
        is kept by request shape, and the strategies with it.
        """
        head, secret = self._head, self.secret
        keys: list[str] = []
        shape: list[bytes | int] = []
        for policy, identities in checks:
            shape += (policy.entry, len(identities))
            suffix = policy.suffix
            keys += [kept_counter_key(head, who.kind, who.value, secret, suffix) for who in identities]
        known = self._layouts.get(tuple(shape))
        if known is None:
            layout = Layout.of((policy.entry, len(identities), policy.layers) for policy, identities in checks)
            strategies = checks[0][0].strategies if len(checks) == 1 else frozenset([p.strategy for p, _ in checks])
            known = remember(self._layouts, tuple(shape), (layout, strategies), LAYOUT_CACHE_SIZE)
        layout, strategies = known
        if layout.penalized:  # after every counter's key
            for policy, identities in checks:
                if policy.penalty_suffix:
                    suffix = policy.penalty_suffix
                    keys += [kept_counter_key(head, who.kind, who.value, secret, suffix) for who in identities]
        return keys, layout, strategies

    def call(self, function: Callable[_P, _T], keys: Sequence[str], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Make one Redis call, ``function(*args, **kwargs)``, that touches ``keys``,
        the script or any other write (the refusal log's), through the
        circuit breaker: while it is open, nothing is sent.

        On a cluster, each node the keys live on has a breaker of its own.
        A call held back by any of them is not made; a failed call counts
        against the nodes that failed only, and closes the breakers of the
        nodes that answered (see
        :class:`~flask_redis_throttle.core.storages.storage.NodeFailure`).

        Only Redis's errors (:data:`~flask_redis_throttle.core.storages.storage.STORAGE_ERRORS`)
        count as failures. Any other exception is a bug, or a dependency
        misbehaving (a client built with a bad option may raise
        :class:`TypeError` on every call): it is raised as
        :class:`UnexpectedError`, which the failure policy still answers,
        never with a 500, but which no breaker counts, since Redis did not fail.

        :raises StorageUnavailable: if the call failed, or a breaker held it back.
        :raises UnexpectedError: if it raised an error that is not Redis's.
        """
        breaker = self.breaker
        if breaker is None:
            return self.unguarded(function, *args, **kwargs)
        if not self.storage.cluster:
            # One server's one breaker: no cluster's bookkeeping of nodes.
            if not breaker.allow():
                raise _held_back(self.storage.url, breaker)
            try:
                result = function(*args, **kwargs)
            except STORAGE_ERRORS as error:
                _settle({"": breaker}, error)
                raise StorageUnavailable(self._failed(error), breaker.retry_in()) from error
            except Exception as error:
                raise self.unexpected(error, (breaker,)) from error
            breaker.success()
            return result
        breakers = self._breakers(keys, breaker)
        allowed: list[CircuitBreaker] = []
        for node, guard in breakers.items():
            if not guard.allow():
                for other in allowed:
                    other.abandon()
                raise _held_back(f"{self.storage.url}{' node ' + node if node else ''}", guard)
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
        """Make one Redis call, ``function(*args, **kwargs)``, as
        :meth:`call` does but past the circuit breakers, which it tells
        nothing: for a call no request waits for, such as the
        release of a slot retried after a stall, or an operator's write (an
        override's): whether it fails says nothing of whether requests can be
        decided, so it must neither open the breaker that guards them nor wait
        for it.

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
        """What went wrong, for the warning: Redis's own words."""
        return f"{self.storage.url}: {error}"

    def unexpected(self, error: Exception, breakers: Iterable[CircuitBreaker] = ()) -> UnexpectedError:
        """The :class:`UnexpectedError` for ``error``, which is not Redis's,
        met on the way to Redis, with ``error`` as its cause. The
        ``breakers`` that let a call through are told nothing, but a probe
        one of them allowed is given back, so that the next call may probe."""
        for guard in breakers:
            guard.abandon()
        failure = UnexpectedError(f"{self.storage.url}: unexpected {type(error).__name__}: {error}")
        failure.__cause__ = error
        return failure

    def _breakers(self, keys: Sequence[str], breaker: CircuitBreaker) -> dict[str, CircuitBreaker]:
        """The breakers of the cluster nodes that hold ``keys``, by node.

        Finding the nodes may build the cluster client, which asks the
        start-up nodes for the slot map: that goes through ``breaker``, the
        cluster's own, so that an unreachable cluster is not asked on every
        request.
        """
        if not breaker.allow():
            raise _held_back(self.storage.url, breaker)
        try:
            nodes = self.storage.nodes(keys)
        except STORAGE_ERRORS as error:
            breaker.failure()
            raise StorageUnavailable(self._failed(error), breaker.retry_in()) from error
        except Exception as error:
            raise self.unexpected(error, (breaker,)) from error
        breaker.success()
        known = self._node_breakers
        return {node: known.get(node) or known.setdefault(node, breaker.like(node)) for node in nodes}


def _settle(breakers: dict[str, CircuitBreaker], error: Exception) -> None:
    """Tell each node's breaker how a failed call went on it: failed, or
    answered; a node to which nothing was sent is told nothing (a probe it
    allowed is given back)."""
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
    """Whether the call that failed with ``error`` may have run, or still
    run: it was sent, and its reply never came (a timeout, or a connection
    lost), or, on a cluster, some node answered its part. A call a breaker
    held back was never sent, nor one that failed to connect
    (:class:`~flask_redis_throttle.core.storages.storage.NotSent`; a client
    whose connections are not kept does not tell, so its connection errors
    all count)."""
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


def _held_back(where: str, breaker: CircuitBreaker) -> StorageUnavailable:
    """The error for a call that an open breaker kept from ``where``."""
    retry_in = breaker.retry_in()
    return StorageUnavailable(f"{where}: not called for {retry_in:.1f} s more (circuit open)", retry_in)


def _decision(
    reply: Reply, checks: Sequence[Check], layout: Layout, cached: bool = False, hold: Hold | None = None
) -> Decision:
    """Find the policy, identity and layer of the reply's deciding counter."""
    number, who, n = layout.places[reply.layer]
    policy, identities = checks[number]
    admitted, _, left, reset, retry, _, penalized = reply
    return Decision(
        admitted, policy, policy.layers[n], identities[who], left, reset, retry, cached, penalized, False, hold
    )
