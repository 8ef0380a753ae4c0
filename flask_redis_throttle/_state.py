"""The rate limiting state of one app, and the request hooks it installs.

:class:`RateLimitState` lives at ``app.extensions["ratelimit"]``; see
:mod:`flask_redis_throttle.extension` for a request's path through it. It
decides requests, and does what follows a refusal besides its 429: the
refusal hooks (the ``on_breach`` functions and the ``request_refused``
signal), the warning for a cost no layer can ever allow, and the refusal
log's entry.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any, NoReturn

from flask import Flask, Request, Response, g, got_request_exception, request
from werkzeug.exceptions import ServiceUnavailable
from werkzeug.wrappers import Response as AnyResponse

from ._config import Settings
from ._decisions import _at_cost, _limit_of, _outcome, _over_quota, _OverQuota, _tighter
from ._headers import LayerNames, retry_after_value, set_headers
from ._metrics import Metrics
from ._notices import Notices, logger
from ._plan import Batch, Plan, Problem, compile_plan, matching
from .core.factory import build_refusal_log, build_throttle
from .core.keys import loggable
from .core.refusals import RefusalLog
from .core.storage import Storage
from .core.throttle import Check, Decision, Hold, StorageUnavailable, Throttle, UnexpectedError
from .errors import RateLimitExceeded
from .signals import RefusalEvent, notify, request_refused

__all__ = ["EXTENSION_KEY", "OUTCOME_ATTRIBUTE", "Outcome", "RateLimitState", "RequestFilter"]

#: A request filter: given the request, True to leave it unlimited.
RequestFilter = Callable[[Request], bool]

#: The key of this extension's state in ``app.extensions``.
EXTENSION_KEY = "ratelimit"

#: The attribute of ``g`` that holds a request's :class:`Outcome`.
OUTCOME_ATTRIBUTE = "_ratelimit"
#: The attribute of ``g`` that holds the concurrency slots a request holds
#: (:class:`~flask_redis_throttle.core.throttle.Hold`), from the moment it
#: takes them until a response or an exception takes them over.
HELD_ATTRIBUTE = "_ratelimit_held"


@dataclasses.dataclass(slots=True)
class Outcome:
    """What ``before_request`` leaves in ``g`` for ``after_request`` and
    :func:`~flask_redis_throttle.current_limit`."""

    #: The names of the layers in play, and the ``RateLimit-Policy`` value.
    labels: LayerNames
    #: The decision the headers show.
    decision: Decision
    #: Whether the response gets a ``Retry-After``: a refusal that can pass later.
    retry: bool = False
    #: The deferred batches to count once the response is known, if any.
    deferred: list[Batch] | None = None
    #: The concurrency slots the request holds, if any: given back when its
    #: response is closed (see :meth:`RateLimitState.release`).
    held: list[Hold] | None = None


class RateLimitState(Notices):
    """The rate limiting state of one app, found at ``app.extensions["ratelimit"]``.

    :param app: the app.
    :param settings: its validated settings.
    :param filters: the request filters (see :meth:`RateLimit.request_filter`).
    :param client: a Redis client to use instead of ``RATELIMIT_STORAGE_URL``.
    :param metrics: where to count decisions; None for no metrics.

    It is the :class:`~flask_redis_throttle.core.breaker.BreakerListener` of its
    circuit breakers: it logs their opening and closing, and exports them
    (see :class:`~flask_redis_throttle._notices.Notices`).
    """

    def __init__(
        self,
        app: Flask,
        settings: Settings,
        filters: list[RequestFilter] | None = None,
        client: Any = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__()
        self.app = app
        self.settings = settings
        self.metrics = metrics
        #: The request filters; any that returns True leaves a request unlimited.
        self.filters: list[RequestFilter] = filters if filters is not None else []
        #: The core decider; tests may override its ``now`` to pin time. When
        #: ``RATELIMIT_ENABLED`` is off there is none, and no storage either.
        self.throttle: Throttle | None = None
        #: Who hit the limits (see :doc:`/refusals`); None when disabled.
        self.refusals: RefusalLog | None = None
        if settings.enabled:
            if client is not None:
                storage = Storage(client)
            else:
                storage = Storage.from_url(settings.storage_url, settings.storage_options, app.instance_path)
            self.throttle = build_throttle(
                storage,
                settings.key_prefix,
                settings.key_secret,
                block_cache_size=settings.block_cache_size,
                breaker_threshold=settings.breaker_threshold,
                breaker_backoff=settings.breaker_backoff,
                breaker_max_backoff=settings.breaker_max_backoff,
                fallback=settings.fallback,
                listener=self,
            )
            if settings.refusal_log_size:
                key = settings.key_prefix + "refusals"
                self.refusals = build_refusal_log(storage, key, settings.refusal_log_size)
        # Keys are real endpoints and the methods their rules accept (Flask
        # answers any other method 405 with no endpoint), so this is bounded.
        self._plans: dict[tuple[str, str], Plan | None] = {}
        if self.throttle is not None and self.throttle.breaker is not None:
            self.breaker_added(self.throttle.breaker.name)
        if self.throttle is not None:
            # Only when a request fails: the slots of one that raises are
            # given back at once (a bound method, held weakly, as the app holds us).
            got_request_exception.connect(self._request_failed, app)

    def plan(self, endpoint: str | None, method: str = "GET") -> Plan | None:
        """The compiled plan of ``endpoint`` for requests of ``method``.

        Compiled on first use and kept, whether by a request or by this call.
        Each of its :attr:`~flask_redis_throttle._plan.Plan.limits` gives its
        policy, scope, strategy, identities, source and options.

        :returns: None when no limit applies: the endpoint is unknown,
            static, exempt or unlimited, or has no limit for ``method``.
        """
        if endpoint is None:
            return None
        key = (endpoint, method.upper())
        try:
            return self._plans[key]
        except KeyError:
            plan = self._plans[key] = compile_plan(self.app, key[0], key[1], self.settings, self._warn)
            return plan

    def before_request(self) -> None:
        """Decide the request; raise :class:`RateLimitExceeded` if it is refused."""
        # This runs before every request: the request is fetched from its
        # context proxy once, and the plan found with one lookup.
        req: Request = request._get_current_object()  # type: ignore[attr-defined]
        if not self._announced:
            self.announce()
        if req.method == "OPTIONS" and getattr(req.url_rule, "provide_automatic_options", False):
            return  # Flask answers these itself (CORS preflights); they cost nothing
        endpoint = req.endpoint
        if endpoint is None:
            return  # 404 and 405
        try:
            plan = self._plans[endpoint, req.method]
        except KeyError:
            plan = self.plan(endpoint, req.method)
        if plan is None or self.throttle is None:
            return
        if self.filters and any(accept(req) for accept in self.filters):
            return
        batches, labels, problems = plan.prepare(req)
        if problems:
            self._problems(problems)
        if batches:
            self._decide(req, endpoint, labels, batches, self.throttle)

    def _decide(
        self, req: Request, endpoint: str, labels: LayerNames, batches: Sequence[Batch], throttle: Throttle
    ) -> None:
        """Decide the request's batches, one script call each, and leave the
        :class:`Outcome` in ``g``; raise the 429 at the first enforced refusal.

        Every request takes this one path; a simple plan's is its one batch,
        enforced and counted before the view."""
        shown: Decision | None = None
        deferred: list[Batch] | None = None
        held: list[Hold] | None = None
        metrics = self.metrics
        for batch in batches:
            started = perf_counter() if metrics is not None else 0.0
            try:
                deduct_later = batch.deferred
                if deduct_later:  # only inspected, at cost 0, and counted after the response
                    decision, deduct_later = self._inspected(batch, throttle)
                else:
                    decision = throttle.hit(batch.checks, batch.cost)
            except Exception as error:
                # Redis's failure; or any other error, which is a bug: never a 500 (see _storage_unavailable).
                failure = error if isinstance(error, StorageUnavailable) else throttle.unexpected(error)
                if metrics is not None:
                    self._record_failure(metrics, endpoint, batch.checks, started, failure)
                if held:  # an earlier batch's slots: the request goes on undecided, as if it held none
                    self.release(held)
                self._storage_unavailable(failure)
                return
            if decision.fallback or self._failing:
                self._watch(decision)
            if metrics is not None:
                outcome = _outcome(decision, batch.shadow)
                metrics.decided(endpoint, decision.policy.scope, outcome, perf_counter() - started)
            shown = decision if shown is None else _tighter(shown, decision)
            if decision.admitted:
                if decision.hold is not None:
                    if held is None:
                        # In g at once, so that whatever ends the request gives them back.
                        held = g._get_current_object().__dict__[HELD_ATTRIBUTE] = []
                    held.append(decision.hold)
                if deduct_later:
                    if deferred is None:
                        deferred = []
                    deferred.append(batch)
                continue
            if batch.shadow:
                self._report_refusal(req, endpoint, batch, decision, True, _over_quota(batch.checks, batch.cost))
                continue
            self._refuse(req, endpoint, labels, shown, batch, decision, held)
        if shown is not None:
            # What setting the attribute of g does, without its __setattr__, a Python call.
            g._get_current_object().__dict__[OUTCOME_ATTRIBUTE] = Outcome(labels, shown, False, deferred, held)

    def _watch(self, decision: Decision) -> None:
        """Log that the fallback decided, or that Redis decides again."""
        if decision.fallback:
            self._fallback_decided()
        elif self._failing and not decision.cached:  # the block cache did not ask Redis
            self._recovered()

    def _inspected(self, batch: Batch, throttle: Throttle) -> tuple[Decision, bool]:
        """The decision on a deferred batch, inspected at cost 0: refused if
        its real cost does not fit; and whether to count it after the response."""
        decision = throttle.hit(batch.checks, 0)
        if not decision.admitted or decision.remaining >= batch.cost:
            return decision, True
        if batch.penalized:
            # Only a real hit lets the script see the offence and start a
            # penalty. It is refused and writes nothing else; should room
            # have appeared meanwhile, it is counted now, and there is
            # nothing left to deduct.
            return throttle.hit(batch.checks, batch.cost), False
        return _at_cost(decision, batch.cost), True

    def after_request(self, response: Response) -> Response:
        """Count deferred limits whose ``deduct_when`` matches, and add the
        headers: ``RateLimit-Policy`` and ``RateLimit`` (and the legacy ones
        if asked for), and ``Retry-After`` to a refusal that can pass later."""
        outcome: Outcome | None = g._get_current_object().__dict__.pop(OUTCOME_ATTRIBUTE, None)
        if outcome is None:
            return response
        if outcome.held is not None:
            self._hand_over(outcome.held, response)
        decision = outcome.decision
        if outcome.deferred:
            decision = self._deduct(outcome.deferred, response, decision)
        settings = self.settings
        if outcome.retry:
            value = retry_after_value(decision.retry_after, settings.retry_after_http_date, time.time())
            response.headers.setdefault("Retry-After", value)
        if settings.headers_enabled:
            set_headers(response.headers, outcome.labels, decision, settings.headers_legacy)
        return response

    def _hand_over(self, held: list[Hold], response: Response) -> None:
        """Give the request's slots back when ``response`` is closed: once
        the WSGI server has sent it, or stopped sending it (the client went
        away from a streamed response)."""
        g._get_current_object().__dict__.pop(HELD_ATTRIBUTE, None)
        response.call_on_close(lambda: self.release(held))

    def _request_failed(self, _app: Flask, **_extra: object) -> None:
        """Give back at once the slots of a request that raised: Flask
        may have no response to close (with ``PROPAGATE_EXCEPTIONS``)."""
        held = g._get_current_object().__dict__.pop(HELD_ATTRIBUTE, None)
        if held:
            self.release(held)

    def release(self, held: list[Hold]) -> None:
        """Give back the concurrency slots of ``held``, each once: one
        script call per decision that took some. One that cannot be given
        back (Redis unreachable) is freed by its lease."""
        while held:
            hold = held.pop()
            try:
                hold.release()
            except Exception as error:  # as in _decide: never raised into the server
                failure = error if isinstance(error, StorageUnavailable) else hold.throttle.unexpected(error)
                self._storage_failed(failure, "a concurrency slot is freed by its lease")

    def _deduct(self, deferred: list[Batch], response: Response, shown: Decision) -> Decision:
        """Count the deferred limits that ``response`` matches; return the
        decision the headers show."""
        assert self.throttle is not None
        for batch in matching(deferred, response):
            try:
                decision = self.throttle.hit(batch.checks, batch.cost)
            except Exception as error:  # as in _decide
                failure = error if isinstance(error, StorageUnavailable) else self.throttle.unexpected(error)
                self._storage_failed(failure, "a response's deduction is lost")
                continue
            # Refused here means others took the room since the inspection:
            # this request goes uncounted (see "deduct_when" in docs/limits).
            shown = _tighter(shown, decision)
        return shown

    def _refuse(
        self,
        req: Request,
        endpoint: str,
        labels: LayerNames,
        shown: Decision,
        batch: Batch,
        decision: Decision,
        held: list[Hold] | None = None,
    ) -> NoReturn:
        """Log and report the refusal ``decision`` of ``batch``, leave
        ``shown`` for the headers, and raise the 429.

        A request that costs more than a layer's whole quota can never pass:
        it gets no ``Retry-After``, since any would promise a pass that will
        not come, and its 429 says why.

        An ``on_breach`` hook's response replaces the 429's body and status;
        an error handler for 429 still sees the exception first.
        """
        over = _over_quota(batch.checks, batch.cost)
        setattr(g._get_current_object(), OUTCOME_ATTRIBUTE, Outcome(labels, shown, over is None, None, held))
        replacement = self._report_refusal(req, endpoint, batch, decision, False, over)
        if over is not None:
            error = RateLimitExceeded(
                over.layer, over.identity, 0, over.policy.scope, penalized=decision.penalized, cost=batch.cost
            )
        else:
            header = None
            if self.settings.retry_after_http_date:
                header = retry_after_value(decision.retry_after, True, time.time())
            error = RateLimitExceeded(
                decision.layer,
                decision.identity,
                decision.retry_after,
                decision.policy.scope,
                header,
                decision.penalized,
                concurrent=decision.policy.concurrent,
            )
        # werkzeug sends an HTTPException's response, when it has one, instead of its own.
        error.response = replacement
        raise error

    def _report_refusal(
        self, req: Request, endpoint: str, batch: Batch, decision: Decision, shadow: bool, over: _OverQuota | None
    ) -> AnyResponse | None:
        """Log a refusal of ``batch``, real or shadow, and tell the refusal hooks.

        :returns: the response an ``on_breach`` hook returned, to send
            instead of the 429; None if none did, or for a shadow refusal.

        :param over: the layer whose whole quota the request's cost exceeds,
            if any (see :func:`_over_quota`).
        """
        if over is not None:
            self._warn_over_quota(endpoint, over, batch, shadow)
        if not decision.cached:
            # A refusal repeated from the block cache was logged when Redis made it.
            if shadow and over is not None:
                logger.warning(
                    "shadow mode: %s on %s would be refused by %s of scope %r: it costs %d, "
                    "more than the whole quota, so it could never pass",
                    loggable(str(over.identity)),
                    endpoint,
                    over.layer,
                    over.policy.scope,
                    over.cost,
                )
            elif shadow:
                logger.warning(
                    "shadow mode: %s on %s would be refused by %s%s of scope %r for %.3f seconds",
                    loggable(str(decision.identity)),
                    endpoint,
                    decision.layer,
                    " (penalty)" if decision.penalized else "",
                    decision.policy.scope,
                    decision.retry_after,
                )
            if self.refusals is not None:
                self._log_refusal(endpoint, batch.checks, decision, shadow)
        limit = _limit_of(decision.policy, batch)
        hook = limit.spec.on_breach if limit is not None else None
        if hook is not None or self.settings.on_breach is not None or request_refused.receivers:
            if over is None:
                policy, layer, identity = decision.policy, decision.layer, decision.identity
                retry_after: int | None = max(1, math.ceil(decision.retry_after))
            else:
                policy, layer, identity, retry_after = over.policy, over.layer, over.identity, None
            event = RefusalEvent(req, endpoint, policy.scope, identity, layer, retry_after, shadow, decision.penalized)
            response = notify(self.app, event, (hook, self.settings.on_breach))
            return None if shadow else response
        return None

    def _warn_over_quota(self, endpoint: str, over: _OverQuota, batch: Batch, shadow: bool) -> None:
        """Warn that a request costs more than a layer's whole quota: a bug
        in a cost function or a dynamic limit, which only the app can fix."""
        limit = _limit_of(over.policy, batch)
        which = limit.describe() if limit is not None else f"scope {over.policy.scope!r}"
        outcome = "shadow mode lets it through" if shadow else "refused without Retry-After"
        self._warn(
            f"a request to {endpoint} costs {over.cost}, more than the whole quota of {over.layer} of {which}: "
            f"it can never pass; {outcome}",
            "over quota",
        )

    def _log_refusal(self, endpoint: str, checks: Sequence[Check], decision: Decision, shadow: bool) -> None:
        """Add the refusal to the log: one ``XADD``, through the circuit
        breaker like every call to Redis, so that a stalled Redis does not
        make each refusal wait for it. A refusal the fallback decided is not
        logged (the fallback's own warning says Redis is unavailable): Redis
        has just failed that request, or the breaker keeps it out.

        On a cluster it goes to a stream on the node of the refusing
        identity's counters (see :meth:`RefusalLog.shard`), through that
        node's breaker."""
        refusals, throttle = self.refusals, self.throttle
        assert refusals is not None
        assert throttle is not None
        if decision.fallback:
            return
        identities = dict.fromkeys(str(identity) for _policy, ids in checks for identity in ids)
        refusing = decision.identity
        stream = refusals.shard(throttle.tag(refusing))
        try:
            throttle.call(
                lambda: refusals.record(
                    endpoint=endpoint,
                    scope=decision.policy.scope,
                    layer=f"{decision.layer.quota}/{decision.layer.name}",
                    strategy=decision.policy.strategy,
                    identity=str(decision.identity),
                    identities=identities,
                    retry_after=decision.retry_after,
                    shadow=shadow,
                    penalized=decision.penalized,
                    stream=stream,
                ),
                (stream,),
            )
        except UnexpectedError as error:
            self._internal_error(f"internal error in the refusal log ({error}); the refusal is not logged", error)
        except StorageUnavailable as error:
            # The refusal stands; only its log entry is lost.
            reason = error.__cause__ or error  # Redis's words, or why it was not called
            self._warn(f"refusal log unavailable ({reason}); the refusal is not logged", "refusal log")

    def _problems(self, problems: Sequence[Problem]) -> None:
        """Warn about bad costs and dynamic limits; a bad dynamic limit
        answers 503 when failing closed, as an unreachable Redis does."""
        fail_open = self.settings.fail_open
        unusable = False
        for kind, message in problems:
            if kind == "limit":
                unusable = True
                message += "; skipping it for this request" if fail_open else "; answering 503"
            self._warn(message, kind)
        if unusable and not fail_open:
            raise ServiceUnavailable("Rate limiting is unavailable; try again shortly.", retry_after=1)

    def _storage_unavailable(self, error: StorageUnavailable) -> None:
        """Let the request through or answer 503, as ``RATELIMIT_FAIL_OPEN``
        says. Redis's failure is an outage, warned of. An error that is not
        Redis's (:class:`UnexpectedError`: a bug, or a client built with a
        bad option) is not: it is logged as an internal error, with its
        traceback, and the request is answered the same way."""
        self._storage_failed(error, "letting requests through" if self.settings.fail_open else "answering 503")
        if not self.settings.fail_open:
            retry_after = max(1, math.ceil(error.retry_in))
            raise ServiceUnavailable("Rate limiting is unavailable; try again shortly.", retry_after=retry_after)

    def _storage_failed(self, error: StorageUnavailable, consequence: str) -> None:
        """Log that ``error`` kept a request from being decided or counted,
        and its ``consequence``: Redis's failure as an outage, any other
        error (:class:`UnexpectedError`) as an internal error."""
        if isinstance(error, UnexpectedError):
            self._internal_error(f"internal error in rate limiting ({error}); {consequence}", error)
        else:
            self._outage(f"rate limit storage unavailable ({error}); {consequence}")

    def _fallback_decided(self) -> None:
        assert self.throttle is not None
        self._outage(f"rate limit storage unavailable ({self.throttle.url}); limiting per process in memory")

    def _record_failure(
        self, metrics: Metrics, endpoint: str, checks: Sequence[Check], started: float, error: StorageUnavailable
    ) -> None:
        """Count a decision Redis failed, or an internal error kept from it,
        under the scope of its first limit."""
        if isinstance(error, UnexpectedError):
            outcome = "internal_error"
        else:
            outcome = "fail_open" if self.settings.fail_open else "fail_closed"
        metrics.decided(endpoint, checks[0][0].scope, outcome, perf_counter() - started)

    def limited_endpoints(self) -> set[str]:
        """The endpoints of the app that have a limit for some method."""
        return {
            rule.endpoint
            for rule in self.app.url_map.iter_rules()
            for method in rule.methods or ()
            if self.plan(rule.endpoint, method) is not None
        }
