"""The rate limiting state of one app, and the request hooks that decide
requests and raise the 429. See docs/architecture.rst.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any, NoReturn

from flask import (
    Flask,
    Request,
    Response,
    g,
    got_request_exception,
    request,
    request_finished,
    request_tearing_down,
)
from werkzeug.exceptions import ServiceUnavailable

from .._ops.metrics import Metrics
from .._ops.notices import Notices
from ..core.bounded import remember
from ..core.engine.leases import Leases
from ..core.engine.throttle import Decision, Hold, StorageUnavailable, Throttle, UnexpectedError
from ..core.factory import build_refusal_log, build_throttle
from ..core.storages.storage import STORAGE_ERRORS, Storage
from ..core.stores.refusals import RefusalLog
from ..errors import RateLimitExceeded
from .config import Settings
from .decisions import at_cost, batch_limit, crossed, outcome_label, over_quota, tighter
from .headers import LayerNames, retry_after_value, set_headers
from .overrides import Overrides
from .plan import Batch, Plan, Problem, compile_plan, matching, plan_of, qualified_name
from .refusing import RefusalReporter
from .releases import Releases
from .spec import LimitSpec

#: A request filter: given the request, True to leave it unlimited.
RequestFilter = Callable[[Request], bool]

#: The attribute of ``g`` that holds a request's :class:`Outcome`.
OUTCOME_ATTRIBUTE = "_ratelimit"
#: The attribute of ``g`` that holds a request's concurrency slots until its end takes them over.
HELD_ATTRIBUTE = "_ratelimit_held"

#: How many plans of ``with limit(...)`` blocks are kept: bounded, for a limit made anew per request.
BLOCK_PLANS = 1024


@dataclasses.dataclass(slots=True)
class Outcome:
    """What ``before_request`` leaves in ``g`` for ``after_request`` and ``current_limit()``."""

    labels: LayerNames
    #: The decision the headers show.
    decision: Decision
    #: Whether the response gets a ``Retry-After``: a refusal that can pass later.
    retry: bool = False
    #: The deferred batches to count once the response is known, if any.
    deferred: list[Batch] | None = None
    held: list[Hold] | None = None


class RateLimitState(Notices):
    """The rate limiting state of one app, found at ``app.extensions["ratelimit"]``.

    :param app: the app.
    :param settings: the app's validated settings.
    :param filters: the request filters (see :meth:`RateLimit.request_filter`).
    :param client: a Redis client to use instead of ``RATELIMIT_STORAGE_URL``, or None.
    :param metrics: where to count decisions; None for no metrics.

    It is its circuit breakers' listener (see :class:`~flask_redis_throttle._ops.notices.Notices`).
    """

    def __init__(
        self,
        app: Flask,
        settings: Settings,
        filters: list[RequestFilter],
        client: Any,
        metrics: Metrics | None,
    ) -> None:
        super().__init__()
        self.app = app
        self.settings = settings
        self.metrics = metrics
        #: The request filters; any that returns True leaves a request unlimited.
        self.filters = filters
        #: The core decider; tests may override its ``now`` to pin time. None when disabled.
        self.throttle: Throttle | None = None
        #: Who hit the limits (see :doc:`/refusals`); None when disabled.
        self.refusals: RefusalLog | None = None
        self.leases: Leases | None = None
        self.near_limits: RefusalLog | None = None
        self.reporter: RefusalReporter | None = None
        self.overrides: Overrides | None = None
        self.releases = Releases(self._storage_failed)
        # Bounded: real endpoints and their rules' methods (Flask answers others 405, with no endpoint).
        self._plans: dict[tuple[str, str], Plan | None] = {}
        self._blocks: dict[tuple[LimitSpec, str, str], Plan | None] = {}
        self._watching_slots = False
        self._slots_lock = threading.Lock()
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
            # The slots an admission that timed out may take once Redis runs it.
            self.throttle.strays = self.releases.add
            self.leases = Leases(self.throttle)
            self.overrides = Overrides(self.throttle, settings, self._overrides_unavailable, self._warn)
            size, prefix = settings.refusal_log_size, settings.key_prefix
            if size:
                self.refusals = build_refusal_log(storage, prefix + "refusals", size)
                if settings.near_limit is not None:
                    self.near_limits = build_refusal_log(storage, prefix + "near-limits", size)
            self.reporter = RefusalReporter(app, self, self.throttle, self.refusals, self.near_limits, metrics)
            if self.throttle.breaker is not None:
                self.breaker_added(self.throttle.breaker.name)
            # The slots of a request that raises are given back at once (held weakly, as the app holds us).
            got_request_exception.connect(self._give_back_held, app)

    def plan(self, endpoint: str | None, method: str = "GET") -> Plan | None:
        """The plan of ``endpoint`` for requests of ``method``, compiled on first use and kept.

        :returns: None when no limit applies: the endpoint is unknown,
            static, exempt or unlimited, or has no limit for ``method``.
        """
        if endpoint is None:
            return None
        try:
            return self._plans[endpoint, method]  # a request's method is upper case already
        except KeyError:
            key = (endpoint, method.upper())
            if key not in self._plans:
                self._plans[key] = compile_plan(self.app, key[0], key[1], self.settings, self._warn)
            return self._plans[key]

    def forget_plans(self) -> None:
        """Forget the compiled plans: for a limit put on a view after its first request."""
        self._plans.clear()
        self._blocks.clear()

    def decide_block(self, spec: LimitSpec) -> None:
        """Decide ``spec`` for the current request now, beside the view's limits
        (``with limit(...)``, see :ref:`block-limits`); raise :class:`RateLimitExceeded` if it refuses."""
        req: Request = request._get_current_object()  # type: ignore[attr-defined]
        endpoint = req.endpoint
        if endpoint is None or self.throttle is None:
            return  # 404s and 405s are decided by nothing; nor is anything when disabled
        if self.filters and any(accept(req) for accept in self.filters):
            return
        key = (spec, endpoint, req.method)
        try:
            plan = self._blocks[key]
        except KeyError:
            written = spec.limit if isinstance(spec.limit, str) else qualified_name(spec.limit)
            scoped = dataclasses.replace(spec, scope=spec.scope or f"{endpoint}:{written}")
            logins = hasattr(self.app, "login_manager")
            plan = plan_of([(scoped, "block")], endpoint, req.method, self.settings, logins, self._warn)
            remember(self._blocks, key, plan, BLOCK_PLANS)
        if plan is None:
            return
        batches, labels, problems = plan.prepare(req)
        if problems:
            self._problems(problems)
        if batches:
            previous: Outcome | None = g.get(OUTCOME_ATTRIBUTE)
            self._decide(req, endpoint, labels, batches, self.throttle, previous)

    def before_request(self) -> None:
        """Decide the request; raise :class:`RateLimitExceeded` if it is refused."""
        req: Request = request._get_current_object()  # type: ignore[attr-defined]
        if not self._announced:
            self.announce()
        if req.method == "OPTIONS" and getattr(req.url_rule, "provide_automatic_options", False):
            return  # Flask answers these itself (CORS preflights); they cost nothing
        endpoint = req.endpoint
        if endpoint is None:
            return  # 404 and 405
        plan = self.plan(endpoint, req.method)
        if plan is None or self.throttle is None:
            return
        if self.filters and any(accept(req) for accept in self.filters):
            return
        batches, labels, problems = plan.prepare(req)
        if problems:
            self._problems(problems)
        if self.overrides is not None:  # run-time overrides: in memory, read again once a second
            batches, labels = self.overrides.apply(batches, labels)
        if batches:
            self._decide(req, endpoint, labels, batches, self.throttle)

    def _decide(
        self,
        req: Request,
        endpoint: str,
        labels: LayerNames,
        batches: Sequence[Batch],
        throttle: Throttle,
        previous: Outcome | None = None,
    ) -> None:
        """Decide the batches, one script call each, and leave the :class:`Outcome` in ``g``
        (a ``with`` block's added to the ``previous`` one); raise the 429 at the first enforced refusal."""
        shown: Decision | None = None
        deferred: list[Batch] | None = None
        metas: list[Batch] | None = None
        held: list[Hold] | None = None
        if previous is not None:
            shown, deferred, held = previous.decision, previous.deferred, previous.held
            labels = previous.labels.joined(labels)
        metrics, leases = self.metrics, self.leases
        near = self.settings.near_limit
        wait = 0.0
        for batch in batches:
            started = perf_counter() if metrics is not None else 0.0
            try:
                deduct_later = batch.deferred
                if deduct_later:  # only inspected, at cost 0, and counted after the response
                    if batch.meta:  # or when another batch refuses
                        decision, deduct_later = at_cost(throttle.hit(batch.checks, 0), 1), False
                        if decision.admitted:
                            metas = [*(metas or ()), batch]
                            continue
                    else:
                        decision, deduct_later = self._inspected(batch, throttle)
                else:
                    decider = leases if leases is not None and batch.leased else throttle
                    decision = decider.hit(batch.checks, batch.cost)
            except Exception as error:
                # Redis's failure; or any other error, which is a bug: never a 500 (see _storage_unavailable).
                failure = error if isinstance(error, StorageUnavailable) else throttle.unexpected(error)
                if metrics is not None:  # under the scope of its first limit
                    outcome = "fail_open" if self.settings.fail_open else "fail_closed"
                    if isinstance(failure, UnexpectedError):
                        outcome = "internal_error"
                    metrics.decided(endpoint, batch.checks[0][0].scope, outcome, perf_counter() - started)
                if held:  # an earlier batch's slots: the request goes on undecided, as if it held none
                    self.release(held)
                self._storage_unavailable(failure)
                return
            if decision.fallback:
                self._outage(f"rate limit storage unavailable ({throttle.url}); limiting per process in memory")
            elif self._failing and not decision.cached:  # the block cache did not ask Redis
                self._recovered()
            if metrics is not None:
                outcome = outcome_label(decision, batch.shadow)
                metrics.decided(endpoint, decision.policy.scope, outcome, perf_counter() - started)
            shown = tighter(shown, decision)
            if decision.admitted:
                if near is not None and crossed(decision, batch.cost, near):
                    self._reporter().near_limit(endpoint, batch, decision)
                if decision.retry_after > wait and not batch.shadow:  # shaped: its turn is later
                    wait = decision.retry_after
                if decision.hold is not None:
                    if held is None:
                        if not self._watching_slots:
                            self._watch_slots()
                        # In g at once, so that whatever ends the request gives them back.
                        held = g._get_current_object().__dict__[HELD_ATTRIBUTE] = []
                    held.append(decision.hold)
                if deduct_later:
                    if deferred is None:
                        deferred = []
                    deferred.append(batch)
                continue
            if batch.shadow:
                over = over_quota(batch.checks, batch.cost)
                self._reporter().report(req, endpoint, batch, decision, True, over, self.settings.on_breach)
                continue
            for meta in metas or ():  # a refusal counts in the meta limits
                try:
                    throttle.hit(meta.checks, 1)
                except Exception as error:  # as above: the refusal stands, its count is lost
                    self._storage_failed(error, "a refusal is not counted in the meta limits", throttle)
            self._refuse(req, endpoint, labels, shown, batch, decision, held)
        if wait > 0:
            # The turn the script reserved (see docs/shaping.rst): up to the limit's delay.
            if metrics is not None:
                metrics.delayed(endpoint, wait)
            time.sleep(wait)
        if shown is not None:
            g._get_current_object().__dict__[OUTCOME_ATTRIBUTE] = Outcome(labels, shown, False, deferred, held)

    def _inspected(self, batch: Batch, throttle: Throttle) -> tuple[Decision, bool]:
        """A deferred batch inspected at cost 0 (refused if its cost does not fit); and whether to count it later."""
        decision = throttle.hit(batch.checks, 0)
        priced = at_cost(decision, batch.cost)
        if priced is not decision and batch.penalized:
            # Only a real hit starts a penalty; should room have appeared meanwhile, it is counted now.
            return throttle.hit(batch.checks, batch.cost), False
        return priced, True

    def after_request(self, response: Response) -> Response:
        """Count deferred limits whose ``deduct_when`` matches, and add the headers (see docs/responses.rst)."""
        outcome: Outcome | None = g._get_current_object().__dict__.pop(OUTCOME_ATTRIBUTE, None)
        if outcome is None:
            return response
        decision = outcome.decision
        if outcome.deferred:
            decision = self._deduct(outcome.deferred, response, decision)
        settings = self.settings
        if outcome.retry:
            value = retry_after_value(decision.retry_after, settings.retry_after_http_date, time.time())
            response.headers.setdefault("Retry-After", value)
        if settings.headers_enabled:
            set_headers(response.headers, outcome.labels, decision, settings.legacy_names, settings.partition_secret)
        return response

    def _watch_slots(self) -> None:
        """Give slots back as requests end, from the first request that takes one: no cost to an app with no cap."""
        with self._slots_lock:
            if not self._watching_slots:
                request_finished.connect(self._request_finished, self.app)
                request_tearing_down.connect(self._give_back_held, self.app)
                self._watching_slots = True

    def _request_finished(self, _app: Flask, response: Response, **_extra: object) -> None:
        """Give the slots back now, so that a client's next request never finds them held; a streamed
        response's (or an ``abort()``'s, which Flask cannot tell apart) when the server closes it."""
        held = g._get_current_object().__dict__.pop(HELD_ATTRIBUTE, None)
        if held and response.is_streamed:
            response.call_on_close(lambda: self.release(held))
        elif held:
            self.release(held)

    def _give_back_held(self, _app: Flask, **_extra: object) -> None:
        """Give back the slots of a request that raised, or ended with no final response."""
        held = g._get_current_object().__dict__.pop(HELD_ATTRIBUTE, None)
        if held:
            self.release(held)

    def release(self, held: list[Hold]) -> None:
        """Give back each slot of ``held`` once; one the storage cannot take now is given back once it
        answers (see :mod:`~flask_redis_throttle._request.releases`), one a bug met is freed by its lease."""
        while held:
            hold = held.pop()
            try:
                hold.release()
            except Exception as error:  # as in _decide: never raised into the server
                if isinstance(error, StorageUnavailable) and not isinstance(error, UnexpectedError):
                    self.releases.add(hold)
                    self._storage_failed(error, "a concurrency slot is given back once it answers")
                    continue
                self._storage_failed(error, "a concurrency slot is freed by its lease", hold.throttle)

    def _deduct(self, deferred: list[Batch], response: Response, shown: Decision) -> Decision:
        """Count the deferred limits that ``response`` matches; return the decision the headers show."""
        assert self.throttle is not None
        for batch in matching(deferred, response):
            try:
                decision = self.throttle.hit(batch.checks, batch.cost)
            except Exception as error:  # as in _decide
                self._storage_failed(error, "a response's deduction is lost", self.throttle)
                continue
            # Refused: others took the room since the inspection; it goes uncounted (see docs/limits).
            shown = tighter(shown, decision)
        return shown

    def _refuse(
        self,
        req: Request,
        endpoint: str,
        labels: LayerNames,
        shown: Decision,
        batch: Batch,
        decision: Decision,
        held: list[Hold] | None,
    ) -> NoReturn:
        """Report the refusal, leave ``shown`` for the headers, and raise the 429: without
        ``Retry-After`` for a cost above a layer's whole quota, which no wait lets pass."""
        over = over_quota(batch.checks, batch.cost)
        setattr(g._get_current_object(), OUTCOME_ATTRIBUTE, Outcome(labels, shown, over is None, None, held))
        replacement = self._reporter().report(req, endpoint, batch, decision, False, over, self.settings.on_breach)
        refusal = decision if over is None else over
        policy, layer = refusal.policy, refusal.layer
        violated = (labels.name(policy, layer),) if self.settings.draft.violated_policies else None
        header = None
        if over is None and self.settings.retry_after_http_date:
            header = retry_after_value(decision.retry_after, True, time.time())
        error = RateLimitExceeded(
            layer,
            refusal.identity,
            decision.retry_after if over is None else 0,
            policy.scope,
            header,
            decision.penalized,
            None if over is None else batch.cost,
            violated,
            over is None and policy.concurrent,
        )
        limit = batch_limit(policy, batch)
        if limit is not None and limit.spec.error_message is not None:
            error.description = self._reporter().error_message(req, limit, error.description)
        # werkzeug sends an HTTPException's response, when it has one, instead of its own.
        error.response = replacement
        raise error

    def _reporter(self) -> RefusalReporter:
        assert self.reporter is not None
        return self.reporter

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

    def _overrides_unavailable(self, error: Exception, again: bool) -> None:
        """The overrides could not be read: the copy in hand stays. A bug is logged at a second failed read
        in a row (by then a client failing every call has had the decisions log it); Redis's is theirs."""
        if again and not isinstance(error, STORAGE_ERRORS):
            self._internal_error(f"internal error reading the overrides ({error}); the last ones read stay", error)

    def _storage_unavailable(self, error: StorageUnavailable) -> None:
        """Log ``error`` (see :meth:`_storage_failed`), and let the request
        through or answer 503, as ``RATELIMIT_FAIL_OPEN`` says."""
        self._storage_failed(error, "letting requests through" if self.settings.fail_open else "answering 503")
        if not self.settings.fail_open:
            retry_after = max(1, math.ceil(error.retry_in))
            raise ServiceUnavailable("Rate limiting is unavailable; try again shortly.", retry_after=retry_after)

    def _storage_failed(self, error: Exception, consequence: str, throttle: Throttle | None = None) -> None:
        """Log that ``error`` kept a request from being decided or counted, and its ``consequence``:
        Redis's failure as an outage, any other (made :class:`UnexpectedError` by ``throttle``) as a bug."""
        if not isinstance(error, StorageUnavailable):
            assert throttle is not None
            error = throttle.unexpected(error)
        if isinstance(error, UnexpectedError):
            self._internal_error(f"internal error in rate limiting ({error}); {consequence}", error)
        else:
            self._outage(f"rate limit storage unavailable ({error}); {consequence}")

    def limited_endpoints(self) -> set[str]:
        """The endpoints of the app that have a limit for some method."""
        return {
            rule.endpoint
            for rule in self.app.url_map.iter_rules()
            for method in rule.methods or ()
            if self.plan(rule.endpoint, method) is not None
        }
