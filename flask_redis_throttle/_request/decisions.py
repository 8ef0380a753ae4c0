"""Small rules about decisions that the request hooks and ``current_limit()`` share."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..core.engine.keys import Identity
from ..core.engine.rates import Layer
from ..core.engine.throttle import Check, Decision, Policy

if TYPE_CHECKING:
    from .plan import Batch, PlannedLimit


def crossed(decision: Decision, cost: int, share: tuple[int, int]) -> bool:
    """Whether an admitted request of ``cost`` took the deciding layer's use from below ``share``
    (numerator, denominator) of its quota to it or past it, exactly, in integers."""
    numerator, denominator = share
    quota = decision.layer.quota
    used = quota - decision.remaining
    return used * denominator >= quota * numerator > (used - cost) * denominator


def outcome_label(decision: Decision, shadow: bool) -> str:
    """The ``outcome`` label of a decision Redis, the block cache or the fallback made."""
    if decision.fallback:
        return "fallback"
    if decision.admitted:
        return "admitted"
    if shadow:
        return "shadow_refused"
    return "blocked_in_process" if decision.cached else "refused"


def batch_limit(policy: Policy, batch: Batch) -> PlannedLimit | None:
    """The limit of ``batch`` whose check has ``policy``."""
    for limit, (checked, _) in zip(batch.limits, batch.checks, strict=True):
        if checked is policy:
            return limit
    return None


class OverQuota(NamedTuple):
    """A layer whose whole quota is less than a request's cost."""

    policy: Policy
    layer: Layer
    #: The first identity the layer counts, to name in the 429 and the hooks.
    identity: Identity
    cost: int


def over_quota(checks: Sequence[Check], cost: int) -> OverQuota | None:
    """The first layer of ``checks`` whose whole quota is less than ``cost`` (as the script finds it,
    so that ``RateLimit`` names the 429's layer); never a concurrency cap: a request takes one slot."""
    for policy, identities in checks:
        if policy.concurrent:
            continue
        for layer in policy.layers:
            if layer.quota < cost:
                return OverQuota(policy, layer, identities[0], cost)
    return None


def at_cost(inspected: Decision, cost: int) -> Decision:
    """What an inspection at cost 0 says of a request of ``cost``: refused until the counter is full
    again if it does not fit (a concurrency cap needs one slot); else ``inspected`` itself."""
    if inspected.policy.concurrent:
        cost = min(cost, 1)
    if inspected.admitted and inspected.remaining < cost:
        return dataclasses.replace(inspected, admitted=False, retry_after=inspected.reset)
    return inspected


def tighter(shown: Decision | None, decision: Decision) -> Decision:
    """Of the decision the headers show so far (None before the first) and another, the one to show,
    chosen as the script chooses its deciding counter: a refusal, then the longest wait, or the least
    quota left and the later reset."""
    if shown is None:
        return decision
    if shown.admitted != decision.admitted:
        return decision if shown.admitted else shown
    if not shown.admitted:
        return decision if decision.retry_after > shown.retry_after else shown
    if decision.remaining != shown.remaining:
        return decision if decision.remaining < shown.remaining else shown
    return decision if decision.reset > shown.reset else shown
