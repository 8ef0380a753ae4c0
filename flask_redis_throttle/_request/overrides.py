"""Overrides in the Flask layer: followed on every request, and changed for the CLI, the
dashboard and ``RateLimit`` alike, over ``core.stores.overrides``. See :doc:`/overrides`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from ..core.bounded import remember
from ..core.engine.keys import Identity, loggable
from ..core.engine.throttle import Check, Policy, Throttle
from ..core.stores.overrides import Override, OverrideFollower, OverrideStore, OverrideTable
from ..errors import Blocked, BlockedForbidden
from .config import Settings
from .headers import LayerNames, retry_after_value
from .plan import Batch, PlannedLimit

#: How many policies made for overrides are kept, and header names for them.
POLICY_CACHE_SIZE = 1024
#: How many unreadable fields a warning names.
UNREADABLE_SHOWN = 10


class Overrides:
    """One app's overrides on its ``throttle``; ``failed`` is told of a failed read, ``warn`` of
    stored overrides that cannot be read."""

    def __init__(
        self,
        throttle: Throttle,
        settings: Settings,
        failed: Callable[[Exception, bool], None],
        warn: Callable[[str, str], None],
    ) -> None:
        self.throttle = throttle
        self.settings = settings
        self.store = OverrideStore(throttle.storage.client, settings.key_prefix, clock=self.now)
        # Not read while the circuit breaker holds calls back: it does not count these reads.
        self.follower = OverrideFollower(
            load=self._load,
            version=self.store.version,
            clock=self.now,
            failed=failed,
            ready=lambda: throttle.breaker is None or not throttle.breaker.open,
        )
        self._warn = warn
        self._warned: tuple[bytes | None, tuple[str, ...]] | None = None
        self._policies: dict[tuple[Policy, tuple[object, ...]], Policy] = {}
        self._labels: dict[tuple[Policy, ...], LayerNames] = {}

    def _load(self) -> tuple[bytes | None, list[Override]]:
        """The version and the overrides in force; an unreadable field is skipped, warned of once."""
        version, found, unreadable = self.store.read()
        if unreadable and (version, tuple(unreadable)) != self._warned:
            self._warned = (version, tuple(unreadable))
            self._warn(
                f"{len(unreadable)} stored override(s) cannot be read and are skipped, the others stay in force: "
                + "; ".join(loggable(reason) for reason in unreadable[:UNREADABLE_SHOWN])
                + ("; ..." if len(unreadable) > UNREADABLE_SHOWN else ""),
                "overrides",
            )
        return version, found

    def now(self) -> float:
        """Seconds since the epoch: the throttle's, which tests may pin."""
        pinned = self.throttle.now()
        return pinned / 1_000_000 if pinned is not None else time.time()

    def apply(self, batches: Sequence[Batch], labels: LayerNames) -> tuple[Sequence[Batch], LayerNames]:
        """A request's batches and header names, with the overrides in force.

        :raises Blocked: (or :class:`BlockedForbidden`, as
            ``RATELIMIT_OVERRIDE_BLOCK_STATUS`` says) if an identity of the
            request is blocked on a scope in play.
        """
        table = self.follower.current()
        if not table.overrides:  # the common case: a clock reading and this test
            return batches, labels
        found = [
            [[table.find(identity, policy.scope) for identity in identities] for policy, identities in batch.checks]
            for batch in batches
        ]
        every = [o for per_batch in found for per_check in per_batch for o in per_check if o is not None]
        if not every:
            return batches, labels
        blocked = next((override for override in every if override.action == "block"), None)
        if blocked is not None and self.settings.override_block_status == 403:
            raise BlockedForbidden()
        if blocked is not None:  # a 429 says when the block ends
            now = self.now()
            header = retry_after_value(blocked.until - now, True, now) if self.settings.retry_after_http_date else None
            raise Blocked(blocked.until - now, header)
        changed: list[Batch] = []
        touched: set[Policy] = set()
        origins: dict[Policy, Policy] = {}  # an override's policy: the limit's it stands for
        for batch, per_batch in zip(batches, found, strict=True):
            checks: list[Check] = []
            limits: list[PlannedLimit] = []
            for (policy, identities), limit, per_check in zip(batch.checks, batch.limits, per_batch, strict=True):
                if any(per_check):
                    touched.add(policy)
                if any(o is not None and o.action == "allow" for o in per_check):
                    continue  # an allowed identity's requests are not limited by this limit
                kept: list[Identity] = []
                for identity, override in zip(identities, per_check, strict=True):
                    if override is None:
                        kept.append(identity)
                    else:
                        overridden = self._policy(policy, override)
                        origins[overridden] = policy
                        checks.append((overridden, [identity]))
                        limits.append(limit)
                if kept:
                    checks.append((policy, kept))
                    limits.append(limit)
            if checks:
                changed.append(Batch(batch.cost, batch.shadow, batch.deferred, checks, limits, leased=batch.leased))
        # The headers name the layers in play: an overridden identity's, not those of the limit
        # it no longer counts under, unless others still do; each in its limit's quota unit.
        in_play = [p for b in changed for p, _ in b.checks]
        policies = tuple(dict.fromkeys([*(p for p in labels.policies if p not in touched or p in in_play), *in_play]))
        named = self._labels.get(policies)
        if named is None:
            units = [labels.unit(origins.get(policy, policy)) for policy in policies]
            named = remember(self._labels, policies, LayerNames.of(policies, units), POLICY_CACHE_SIZE)
        return changed, named

    def _policy(self, policy: Policy, override: Override) -> Policy:
        """``policy`` with the override's layers, so the identity's counters and penalties carry on;
        a concurrency cap, not a rate, stays the view's."""
        if policy.concurrent:
            return policy
        key = (policy, override.layers)
        made = self._policies.get(key)
        if made is None:
            made = remember(self._policies, key, dataclasses.replace(policy, layers=override.layers), POLICY_CACHE_SIZE)
        return made

    def put(self, override: Override) -> Override:
        """Store ``override``, log it and follow it at once; past the breaker, as :meth:`remove`: an
        operator's failed change never opens it on the requests."""
        self.throttle.unguarded(self.store.put, override)
        self.follower.refresh(force=True)
        return override

    def remove(self, target: str | None, scope: str | None, every_scope: bool, by: str) -> list[Override]:
        """Remove the overrides of ``target`` (of everyone if None), log it and follow it at once."""
        gone: list[Override] = self.throttle.unguarded(self.store.remove, target, scope, every_scope=every_scope, by=by)
        self.follower.refresh(force=True)
        return gone

    def table(self) -> OverrideTable:
        """The overrides in force, read from storage now."""
        self.follower.refresh(force=True)
        return self.follower.table
