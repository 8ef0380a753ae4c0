"""The request-time API: what the limits say about the current request.

:func:`current_limit` reads the decision the extension already made, so it
costs nothing; :func:`check` and :func:`current_limits` ask Redis at cost 0,
which the script answers without writing (see ``lua/main.lua``), so the
counters are exactly as a request would find them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from flask import g, request

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
    """The deciding limit of a request: of every layer of every identity it
    was checked against, the one with the least room (the one the
    ``RateLimit`` header shows), or the one that refused it.

    :param limit: the limit, with its strategy, identities and where it
        was written (see :class:`~flask_redis_throttle._request.plan.PlannedLimit`).
    :param scope: the scope its counters are kept under.
    :param layer: its deciding layer, such as ``10 per 1 minute``.
    :param identity: whose counter it is.
    :param remaining: the quota that counter has left, after this request.
    :param reset: seconds until that counter is back to its full quota.
    :param reset_at: the same moment, as a Unix time.
    :param breached: True if the counter had no room for the request: it
        was refused (or, for a shadow limit, would have been).
    :param retry_after: seconds until the request would pass; 0 unless
        ``breached``, or, for a request a shaped limit let wait for its
        turn, how long it waited (see :doc:`/shaping`).
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
    """The deciding limit of the current request, as it was decided before
    the view: readable in the view, in a template (``{{ current_limit() }}``
    is a template global), in an error handler for the 429, and in an
    ``after_request`` function registered after ``init_app``.

    It reads what the extension kept for the ``RateLimit`` header, so it
    costs no call to Redis. A ``deduct_when`` limit counts the request
    only after the response, so before that it shows the room the request
    found, not what is left after it.

    :returns: None outside a request, and for a request no limit was
        checked against: an unlimited or exempt view, a request filter's, one
        while rate limiting is disabled, or one Redis could not decide.
    """
    outcome: Outcome | None = g.get(OUTCOME_ATTRIBUTE) if g else None
    if outcome is None:
        return None
    state: RateLimitState | None = state_of(required=False)
    return CurrentLimit.of(outcome.decision, state.plan(request.endpoint, request.method) if state else None)


def current_limits() -> list[CurrentLimit]:
    """Every limit the current request was checked against before its view,
    each with its own deciding layer, in the order of its plan (see
    :ref:`current-limit`).

    The limit that refused the request is as it was decided, ``breached``;
    the others are read from Redis now, at cost 0, which writes nothing:
    one script call for each, so this costs what :func:`check` does per
    limit, and :func:`current_limit` nothing.

    :returns: an empty list where :func:`current_limit` returns None, and
        with the limits read so far when Redis cannot answer (that is
        logged as a request's failure is).
    """
    outcome: Outcome | None = g.get(OUTCOME_ATTRIBUTE) if g else None
    state: RateLimitState | None = state_of(required=False)
    if outcome is None or state is None or state.throttle is None:
        return []
    req = request._get_current_object()  # type: ignore[attr-defined]
    plan = state.plan(req.endpoint, req.method)
    if plan is None:
        return []
    refused = None if outcome.decision.admitted else outcome.decision
    batches, _labels, _problems = plan.prepare(req)
    found: list[CurrentLimit] = []
    for batch in batches:
        for check in batch.checks:
            if refused is not None and check[0] is refused.policy:
                found.append(CurrentLimit.of(refused, plan))
                continue
            decision = _inspected(state, [check], "current_limits()")
            if decision is None:
                return found
            found.append(CurrentLimit.of(decision, plan))
    return found


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
    """Decide the current request against its limits now, without counting it.

    Every limit is decided at cost 0, which writes nothing, through the same
    throttle as requests; a request whose cost is more than a counter has
    left is ``breached``. Shadow limits are left out, since they never
    refuse. Nothing is logged, no hook is called and nothing is raised for
    a refusal: what to do is the caller's choice.

    .. code-block:: python

        @app.post("/search/preview")
        def preview():
            found = check("search", "POST")     # would a search pass now?
            if found is not None and found.breached:
                return {"wait": found.retry_after}
            ...

    :param endpoint: whose limits to decide; by default the request's own.
    :param method: the HTTP method those limits are for; by default the request's.
    :returns: the deciding limit, or None when no limit applies, rate
        limiting is disabled, a request filter exempts the request, or Redis
        could not answer (that is logged as a request's failure is).
    """
    state: RateLimitState | None = state_of(required=False)
    if state is None or state.throttle is None:
        return None
    req = request._get_current_object()  # type: ignore[attr-defined]
    plan = state.plan(endpoint or req.endpoint, method or req.method)
    if plan is None or any(accept(req) for accept in state.filters):
        return None
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
