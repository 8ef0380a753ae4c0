"""A request's script call, apart from its time and cost, worked out once.

What a call sends depends on the request's policies and identities only:
its keys (each identity's, under each policy, then the penalty keys), its
plan and reply layout, and its strategies. The same client comes back to
the same endpoint request after request, so :class:`ReadyCalls` keeps each
such call by the ids of its policies and identities, and a request that
came before is one lookup, with no key hashed or joined again.

Keyed by ids, a lookup hashes no policy or identity, field by field; each
call keeps the policies and identities it was made for, so that no other
object can take their ids while it is kept. A call with an identity too
long for the key cache (see :data:`~flask_redis_throttle.core.keys.CACHED_VALUE_LENGTH`)
is made for its request alone and not kept, so a hostile client's
megabyte identities are never held here.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bounded import remember
from .codec import LAYOUT_CACHE_SIZE, Layout
from .keys import CACHED_VALUE_LENGTH, Identity, kept_counter_key

if TYPE_CHECKING:
    from .policy import Check, Policy

__all__ = ["CALL_CACHE_SIZE", "Ready", "ReadyCalls"]

#: How many calls (sets of policies and identities) are kept: enough for the
#: clients of a busy minute, bounded so that a flood of new ones cannot grow
#: the process (see :mod:`~flask_redis_throttle.core.bounded`).
CALL_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Ready:
    """One request's script call, but for its time and cost.

    :param keys: every counter's key, in the plan's order, then the
        penalty keys of the policies that have a penalty.
    :param layout: the plan, and where each layer of the reply is.
    :param strategies: the strategies of the script it takes.
    :param checks: the policies and identities it was made for.
    """

    keys: tuple[str, ...]
    layout: Layout
    strategies: frozenset[str]
    checks: tuple[Check, ...]


class ReadyCalls:
    """The calls of one throttle, made once and kept (bounded).

    :param head: the keys' start: the throttle's prefix and ``{``.
    :param secret: the key secret (``RATELIMIT_KEY_SECRET``).
    """

    def __init__(self, head: str, secret: bytes) -> None:
        self.head = head
        self.secret = secret
        #: The calls, by the ids of their policies and identities.
        self._calls: dict[tuple[int, ...], Ready] = {}
        #: Each request shape's layout and strategies, by the ids of its
        #: policies and their numbers of identities, kept with its policies.
        self._layouts: dict[tuple[int, ...], tuple[Layout, frozenset[str], tuple[Policy, ...]]] = {}

    def of(self, checks: Sequence[Check]) -> Ready:
        """The call of a request that checks ``checks``."""
        found: list[int] = []
        for policy, identities in checks:
            found += (id(policy), len(identities), *map(id, identities))
        ready = self._calls.get(tuple(found))
        return ready if ready is not None else self._make(checks, tuple(found))

    def _make(self, checks: Sequence[Check], found: tuple[int, ...]) -> Ready:
        head, secret = self.head, self.secret
        keys = [
            kept_counter_key(head, who.kind, who.value, secret, policy.suffix) for policy, ids in checks for who in ids
        ]
        layout, strategies = self._layout(checks)
        if layout.penalized:  # after every counter's key
            penalized = [(policy.penalty_suffix, ids) for policy, ids in checks if policy.penalty_suffix]
            keys += [
                kept_counter_key(head, who.kind, who.value, secret, suffix) for suffix, ids in penalized for who in ids
            ]
        kept = tuple((policy, tuple(identities)) for policy, identities in checks)
        ready = Ready(tuple(keys), layout, strategies, kept)
        if all(len(who.value) <= CACHED_VALUE_LENGTH for _, ids in kept for who in ids):
            remember(self._calls, found, ready, CALL_CACHE_SIZE)
        return ready

    def _key(self, identity: Identity, suffix: str) -> str:
        return kept_counter_key(self.head, identity.kind, identity.value, self.secret, suffix)

    def _layout(self, checks: Sequence[Check]) -> tuple[Layout, frozenset[str]]:
        """The layout and strategies of the requests shaped as ``checks``:
        their policies and how many identities each has (bounded, since a
        dynamic limit makes policies)."""
        shape = tuple(number for policy, ids in checks for number in (id(policy), len(ids)))
        known = self._layouts.get(shape)
        if known is not None:
            return known[0], known[1]
        layout = Layout.of((policy.entry, len(identities), policy.layers) for policy, identities in checks)
        strategies = checks[0][0].strategies if len(checks) == 1 else frozenset([p.strategy for p, _ in checks])
        remember(self._layouts, shape, (layout, strategies, tuple(policy for policy, _ in checks)), LAYOUT_CACHE_SIZE)
        return layout, strategies
