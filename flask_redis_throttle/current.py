"""What the limits say about the current request (:ref:`current-limit`): :func:`current_limit` reads the
decision already made; :func:`check` and :func:`current_limits` ask Redis at cost 0, which writes nothing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from flask import Request, g, request

from ._request.decisions import at_cost, tighter
from ._request.plan import Plan, PlannedLimit
from ._request.state import OUTCOME_ATTRIBUTE, Outcome, RateLimitState
from .core.engine.keys import Identity
from .core.engine.rates import Layer
from .core.engine.throttle import Check, Decision, StorageUnavailable, UnexpectedError
from .decorators import state_of

__all__ = ["CurrentLimit", "check", "current_limit", "current_limits"]


@dataclass(frozen=True)
class CurrentLimit:
    """The deciding limit of a request: the layer of an identity with the least room (the one the ``RateLimit``
    header shows), or the one that refused it.

    :param limit: the limit (a :class:`~flask_redis_throttle._request.plan.PlannedLimit`).
    :param scope: the scope its counters are kept under.
    :param layer: its deciding layer.
    :param identity: whose counter it is.
    :param remaining: the quota that counter has left, after this request.
    :param reset: seconds until that counter is full again.
    :param reset_at: the same moment, as a Unix time.
    :param breached: whether the counter had no room: the request was (or, shadowed, would have been) refused.
    :param retry_after: seconds until it would pass; for a shaped request, how long it waited (:doc:`/shaping`).
    """

    limit: PlannedLimit | None
    scope: str
    layer: Layer
    identity: Identity
    remaining: int
    reset: float
    reset_at: float
    breached: bool
    retry_after: float

    @classmethod
    def of(cls, decision: Decision, plan: Plan | None) -> CurrentLimit:
        """The deciding limit of ``decision``, one of ``plan``'s."""
        limits = plan.limits if plan is not None else ()
        limit = next((limit for limit in limits if limit.owns(decision.policy)), None)
        return cls(
            limit,
            decision.policy.scope,
            decision.layer,
            decision.identity,
            decision.remaining,
            decision.reset,
            time.time() + decision.reset,
            not decision.admitted,
            decision.retry_after,
        )


def current_limit() -> CurrentLimit | None:
    """The deciding limit of the current request as decided before the view, at no cost (also a template global).
    A ``deduct_when`` limit shows the room the request found, since it counts only after the response.

    :returns: None outside a request, or for a request no limit was checked against.
    """
    outcome: Outcome | None = g.get(OUTCOME_ATTRIBUTE) if g else None
    if outcome is None:
        return None
    state: RateLimitState | None = state_of(required=False)
    return CurrentLimit.of(outcome.decision, state.plan(request.endpoint, request.method) if state else None)


def current_limits() -> list[CurrentLimit]:
    """Every limit the current request was checked against before its view, each with its deciding layer, in its
    plan's order: the refusing one as decided, the others read now at cost 0, a script call each.

    :returns: an empty list where :func:`current_limit` returns None; those read so far if Redis fails (logged).
    """
    outcome: Outcome | None = g.get(OUTCOME_ATTRIBUTE) if g else None
    if outcome is None or (planned := _planned(None, None)) is None:
        return []
    state, req, plan = planned
    refused = None if outcome.decision.admitted else outcome.decision
    found: list[CurrentLimit] = []
    for batch in plan.prepare(req)[0]:
        for check in batch.checks:
            is_refused = refused is not None and check[0] is refused.policy
            decision = refused if is_refused else _inspected(state, [check], "current_limits()")
            if decision is None:
                return found
            found.append(CurrentLimit.of(decision, plan))
    return found


def _planned(endpoint: str | None, method: str | None) -> tuple[RateLimitState, Request, Plan] | None:
    """The state, request and plan of ``endpoint`` and ``method``; None without one, or while disabled."""
    state: RateLimitState | None = state_of(required=False)
    if state is None or state.throttle is None:
        return None
    req: Request = request._get_current_object()  # type: ignore[attr-defined]
    plan = state.plan(endpoint or req.endpoint, method or req.method)
    return None if plan is None else (state, req, plan)


def _inspected(state: RateLimitState, checks: Sequence[Check], caller: str) -> Decision | None:
    """``checks`` decided at cost 0; None, logged, when Redis cannot answer."""
    assert state.throttle is not None
    try:
        return state.throttle.hit(checks, 0)
    except UnexpectedError as error:
        state._internal_error(f"internal error in rate limiting ({error}); {caller} knows no limit", error)
    except StorageUnavailable as error:
        state._warn(f"rate limit storage unavailable ({error}); {caller} knows no limit")
    return None


def check(endpoint: str | None = None, method: str | None = None) -> CurrentLimit | None:
    """Decide the current request against its limits now at cost 0, without counting, logging, hooks or raising;
    shadow limits are left out (see :ref:`current-limit`).

    :param endpoint: whose limits to decide; by default the request's own.
    :param method: their HTTP method; by default the request's.
    :returns: the deciding limit, or None when no limit applies, or Redis could not answer (logged).
    """
    planned = _planned(endpoint, method)
    if planned is None or any(accept(planned[1]) for accept in planned[0].filters):
        return None
    state, req, plan = planned
    batches, _labels, problems = plan.prepare(req)
    for kind, message in problems:
        state._warn(message, kind)
    shown: Decision | None = None
    for batch in batches:
        if batch.shadow:
            continue
        inspected = _inspected(state, batch.checks, "check()")
        if inspected is None:
            return None
        shown = tighter(shown, at_cost(inspected, batch.cost))
    return None if shown is None else CurrentLimit.of(shown, plan)
