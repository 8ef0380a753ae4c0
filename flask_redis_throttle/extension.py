"""The Flask glue: :class:`RateLimit`, and the per-app state it installs.

A request's path through it:

1. ``before_request`` finds the :class:`~flask_redis_throttle.plan.Plan` of
   the request's endpoint and method, compiled on first use (see
   :mod:`flask_redis_throttle.plan`), and skips the request if a request
   filter says so;
2. the plan's resolvers name the request's identities;
3. :meth:`Throttle.hit <flask_redis_throttle.throttle.Throttle.hit>` decides
   every layer of every identity in one script call (a plan that uses
   per-request options may take more, see :doc:`/limits`);
4. a refusal is logged, told to the refusal hooks, and raises
   :class:`~flask_redis_throttle.RateLimitExceeded` (429);
5. ``after_request`` counts the requests whose ``deduct_when`` matches their
   response, and adds the headers, to the view's response or to the 429.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from flask import Flask, Request, Response, current_app, g, request
from werkzeug.exceptions import ServiceUnavailable
from werkzeug.wrappers import Response as AnyResponse

from .blocks import BlockCache
from .breaker import BreakerListener, CircuitBreaker
from .cli import ratelimit as ratelimit_cli
from .clients import embedded_client
from .config import Settings
from .errors import RateLimitExceeded
from .headers import LayerNames, legacy_headers, retry_after_value
from .identity import parse_identity
from .keys import Identity, identity_tag, loggable
from .metrics import Metrics, metrics_for
from .plan import Batch, Plan, PlannedLimit, Problem, compile_plan, matching
from .rates import Layer
from .refusals import CLUSTER_SHARDS, RefusalLog
from .reset import reset_identity
from .signals import RefusalEvent, notify, request_refused
from .storage import STORAGE_ERRORS, Storage
from .throttle import Check, Decision, Policy, StorageUnavailable, Throttle

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["EXTENSION_KEY", "RateLimit", "RateLimitState", "refusal_log"]

logger = logging.getLogger("flask_redis_throttle")
#: The circuit breakers' opening and closing, a logger of their own so that
#: an operator can route or silence them apart from the per-request warnings.
breaker_logger = logging.getLogger("flask_redis_throttle.breaker")

#: The key of this extension's state in ``app.extensions``.
EXTENSION_KEY = "ratelimit"

#: The shortest gap between two warnings of one kind, in seconds.
WARNING_INTERVAL = 10.0

#: A request filter: given the request, True to leave it unlimited.
RequestFilter = Callable[[Request], bool]

#: The attribute of ``g`` that holds a request's :class:`Outcome`.
OUTCOME_ATTRIBUTE = "_ratelimit"


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


class RateLimit:
    """The extension. ``RateLimit(app)``, or ``RateLimit()`` then :meth:`init_app`.

    It keeps no app of its own: each app's settings and storage live in
    ``app.extensions["ratelimit"]``, so one instance can serve many apps.

    :param app: the app to set up at once, if any.
    :param redis: a Redis client the app already has (a :class:`redis.Redis`,
        one from :meth:`redis.sentinel.Sentinel.master_for`, or a
        :class:`redis.cluster.RedisCluster`), to use instead of building one
        from ``RATELIMIT_STORAGE_URL``. Its own options (timeouts, retries)
        are kept as they are; see :doc:`/deployment`.
    :param metrics: True to export Prometheus metrics of every decision in
        ``prometheus_client``'s default registry, or a
        :class:`~prometheus_client.CollectorRegistry` to export them in; False
        for none. It needs the ``prometheus`` extra; see :doc:`/operations`.
    :raises ImportError: if ``metrics`` is on and ``prometheus_client`` is
        not installed.
    """

    def __init__(
        self, app: Flask | None = None, *, redis: Any = None, metrics: bool | CollectorRegistry = False
    ) -> None:
        self.redis = redis
        #: The metrics every app of this instance records, or None.
        self.metrics: Metrics | None = None
        if metrics is not False:
            self.metrics = metrics_for(None if metrics is True else metrics)
        #: The functions registered with :meth:`request_filter`, shared by
        #: every app this instance serves.
        self.filters: list[RequestFilter] = []
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set up rate limiting on ``app``.

        Reads these settings once, filling in their defaults (see :doc:`/config`):
        ``RATELIMIT_ENABLED``, ``RATELIMIT_STORAGE_URL``,
        ``RATELIMIT_STORAGE_OPTIONS``, ``RATELIMIT_KEY_PREFIX``,
        ``RATELIMIT_DEFAULT``, ``RATELIMIT_DEFAULT_MODE``, ``RATELIMIT_APPLICATION``,
        ``RATELIMIT_HEADERS_ENABLED``, ``RATELIMIT_HEADERS_LEGACY``,
        ``RATELIMIT_RETRY_AFTER``, ``RATELIMIT_FAIL_OPEN``,
        ``RATELIMIT_IDENTITIES``, ``RATELIMIT_IPV6_PREFIX``,
        ``RATELIMIT_KEY_SECRET``, ``RATELIMIT_STRATEGY``,
        ``RATELIMIT_REFUSAL_LOG_SIZE``, ``RATELIMIT_BLOCK_CACHE_SIZE``,
        ``RATELIMIT_SHADOW``, ``RATELIMIT_ON_BREACH``,
        ``RATELIMIT_BREAKER_THRESHOLD``, ``RATELIMIT_BREAKER_BACKOFF``,
        ``RATELIMIT_BREAKER_MAX_BACKOFF`` and ``RATELIMIT_FALLBACK``.

        It also adds the ``flask ratelimit`` commands to the app (see :doc:`/cli`),
        and :func:`~flask_redis_throttle.current_limit` to its templates' globals.
        Nothing is sent to Redis here, so an app starts even while Redis is down.

        :raises RuntimeError: if the extension is already set up on ``app``.
        :raises ConfigurationError: if a setting has a bad value.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError("flask-redis-throttle is already set up on this app; call init_app once per app")
        settings = Settings.from_config(app.config)
        state = RateLimitState(app, settings, self.filters, self.redis, self.metrics)
        app.extensions[EXTENSION_KEY] = state
        app.cli.add_command(ratelimit_cli)
        from .current import current_limit  # not at the top: it imports this module

        app.add_template_global(current_limit, "current_limit")
        if settings.enabled:
            app.before_request(state.before_request)
            app.after_request(state.after_request)

    def reset(self, identity: str | Identity, *, scope: str | None = None, app: Flask | None = None) -> int:
        """Delete an identity's counters, and its penalties, as ``flask
        ratelimit reset`` does: in every scope, or in ``scope`` only.

        .. code-block:: python

            ratelimit.reset("user:42")                   # a support agent's "unblock"
            ratelimit.reset("ip:203.0.113.5", scope="login")

        Counting starts afresh at the identity's next request. This process
        forgets its cached refusals at once; other processes' block caches
        may go on refusing the identity for up to a second.

        :param identity: as the CLI and the refusal log write it:
            ``ip:<address>`` (an IPv6 address is grouped by
            ``RATELIMIT_IPV6_PREFIX``, as requests are), ``user:<id>``,
            ``key:<module>.<function>:<value>``; or an
            :class:`~flask_redis_throttle.Identity`.
        :param scope: only this scope's counters (a limit's ``scope=``, or
            by default its endpoint; see :ref:`scopes`); None for every scope.
        :param app: the app whose counters to reset; by default the current app.
        :returns: how many keys were deleted; 0 if the identity had none.
        :raises ValueError: if ``identity`` names no identity, saying why,
            or ``scope`` is empty.
        :raises RuntimeError: if the extension is not set up on the app, or
            is disabled.
        :raises StorageUnavailable: if Redis could not answer; the keys
            deleted before that stay deleted.
        """
        state: RateLimitState | None = (app or current_app).extensions.get(EXTENSION_KEY)
        if state is None or state.throttle is None:
            raise RuntimeError("rate limiting is not set up on this app, or RATELIMIT_ENABLED is False")
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise ValueError(f"scope {scope!r} must be a non-empty string, or None for every scope")
        if not isinstance(identity, Identity):
            identity = parse_identity(identity, state.settings.ipv6_prefix)
        try:
            return reset_identity(state.throttle, identity, [scope])
        except STORAGE_ERRORS as error:
            raise StorageUnavailable(f"{state.throttle.storage.url}: {error}") from error

    def request_filter(self, function: RequestFilter) -> RequestFilter:
        """Register a function of the request that, when it returns True,
        leaves the request unlimited: not counted, not refused, no headers.

        .. code-block:: python

            @ratelimit.request_filter
            def internal(request):
                return request.remote_addr in TRUSTED_ADDRESSES

        It is called only for requests to limited endpoints, before anything
        else; it applies to every app this instance serves, including those
        set up before it was registered.

        :raises TypeError: if ``function`` is not callable.
        """
        if not callable(function):
            raise TypeError(f"request_filter() takes a function of the request, not {function!r}")
        self.filters.append(function)
        return function


class RateLimitState:
    """The rate limiting state of one app, found at ``app.extensions["ratelimit"]``.

    :param app: the app.
    :param settings: its validated settings.
    :param filters: the request filters (see :meth:`RateLimit.request_filter`).
    :param client: a Redis client to use instead of ``RATELIMIT_STORAGE_URL``.
    :param metrics: where to count decisions; None for no metrics.

    It is the :class:`~flask_redis_throttle.breaker.BreakerListener` of its
    circuit breakers: it logs their opening and closing, and exports them.
    """

    #: The monotonic clock that spaces warnings; tests may replace it.
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(
        self,
        app: Flask,
        settings: Settings,
        filters: list[RequestFilter] | None = None,
        client: Any = None,
        metrics: Metrics | None = None,
    ) -> None:
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
            self.throttle = _throttle(storage, settings, self)
            if settings.refusal_log_size:
                key = settings.key_prefix + "refusals"
                shards = CLUSTER_SHARDS if storage.cluster else 1
                self.refusals = RefusalLog(storage.client, key, settings.refusal_log_size, shards)
        # Keys are real endpoints and the methods their rules accept (Flask
        # answers any other method 405 with no endpoint), so this is bounded.
        self._plans: dict[tuple[str, str], Plan | None] = {}
        self._warning_lock = threading.Lock()
        #: For each kind of warning: when it may be logged again, and how
        #: many were not logged since the last one.
        self._warnings: dict[str, tuple[float, int]] = {}
        #: Whether Redis failed a request since it last decided one, and how
        #: many it failed: recovery is logged with that count, then reset.
        self._failing = False
        self._failed_requests = 0
        #: Whether the start-up line was logged (see :meth:`announce`).
        self._announced = False
        if self.throttle is not None and self.throttle.breaker is not None:
            self.breaker_added(self.throttle.breaker.name)

    def plan(self, endpoint: str | None, method: str = "GET") -> Plan | None:
        """The compiled plan of ``endpoint`` for requests of ``method``.

        Compiled on first use and kept, whether by a request or by this call.
        Each of its :attr:`~flask_redis_throttle.plan.Plan.limits` gives its
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
        # context proxy once, and a simple plan's one batch is built by plain loops.
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
        :class:`Outcome` in ``g``; raise the 429 at the first enforced refusal."""
        shown: Decision | None = None
        deferred: list[Batch] | None = None
        metrics = self.metrics
        for batch in batches:
            started = perf_counter() if metrics is not None else 0.0
            try:
                # Where every batch is decided; a deferred one is only inspected, at cost 0.
                decision = throttle.hit(batch.checks, 0 if batch.deferred else batch.cost)
                deduct_later = batch.deferred
                if deduct_later:
                    decision, deduct_later = self._inspected(batch, decision, throttle)
            except StorageUnavailable as error:
                if metrics is not None:
                    self._record_failure(metrics, endpoint, batch.checks, started)
                self._storage_unavailable(error)
                return
            if decision.fallback:
                self._fallback_decided()
            elif self._failing and not decision.cached:  # the block cache did not ask Redis
                self._recovered()
            if metrics is not None:
                outcome = _outcome(decision, batch.shadow)
                metrics.decided(endpoint, decision.policy.scope, outcome, perf_counter() - started)
            shown = decision if shown is None else _tighter(shown, decision)
            if decision.admitted:
                if deduct_later:
                    if deferred is None:
                        deferred = []
                    deferred.append(batch)
                continue
            if batch.shadow:
                self._report_refusal(req, endpoint, batch, decision, True, _over_quota(batch.checks, batch.cost))
                continue
            self._refuse(req, endpoint, labels, shown, batch, decision)
        if shown is not None:
            setattr(g._get_current_object(), OUTCOME_ATTRIBUTE, Outcome(labels, shown, False, deferred))

    def _inspected(self, batch: Batch, decision: Decision, throttle: Throttle) -> tuple[Decision, bool]:
        """The decision on a deferred batch, inspected at cost 0: refused if
        its real cost does not fit; and whether to count it after the response."""
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
        outcome: Outcome | None = g._get_current_object().pop(OUTCOME_ATTRIBUTE, None)
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
            headers = response.headers
            labels = outcome.labels
            headers.set("RateLimit-Policy", labels.policy_header)
            headers.set("RateLimit", labels.state(decision.policy, decision.layer, decision.remaining, decision.reset))
            if settings.headers_legacy:
                for header, value in legacy_headers(
                    decision.layer.quota, decision.remaining, decision.reset, time.time()
                ):
                    headers.set(header, value)
        return response

    def _deduct(self, deferred: list[Batch], response: Response, shown: Decision) -> Decision:
        """Count the deferred limits that ``response`` matches; return the
        decision the headers show."""
        assert self.throttle is not None
        for batch in matching(deferred, response):
            try:
                decision = self.throttle.hit(batch.checks, batch.cost)
            except StorageUnavailable as error:
                self._outage(f"rate limit storage unavailable ({error}); a response's deduction is lost")
                continue
            # Refused here means others took the room since the inspection:
            # this request goes uncounted (see "deduct_when" in docs/limits).
            shown = _tighter(shown, decision)
        return shown

    def _refuse(
        self, req: Request, endpoint: str, labels: LayerNames, shown: Decision, batch: Batch, decision: Decision
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
        setattr(g._get_current_object(), OUTCOME_ATTRIBUTE, Outcome(labels, shown, over is None))
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
        stream = refusals.shard(identity_tag(refusing.kind, refusing.value, throttle.secret))
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
        says, with a warning. An error that is not Redis's (a bug, or a
        client built with a bad option) is logged with its traceback."""
        outcome = "letting requests through" if self.settings.fail_open else "answering 503"
        cause = error.__cause__
        unexpected = cause if cause is not None and not isinstance(cause, STORAGE_ERRORS) else None
        self._outage(f"rate limit storage unavailable ({error}); {outcome}", exc_info=unexpected)
        if not self.settings.fail_open:
            retry_after = max(1, math.ceil(error.retry_in))
            raise ServiceUnavailable("Rate limiting is unavailable; try again shortly.", retry_after=retry_after)

    def _fallback_decided(self) -> None:
        assert self.throttle is not None
        self._outage(f"rate limit storage unavailable ({self.throttle.storage.url}); limiting per process in memory")

    def _record_failure(self, metrics: Metrics, endpoint: str, checks: Sequence[Check], started: float) -> None:
        """Count a decision Redis failed, under the scope of its first limit."""
        outcome = "fail_open" if self.settings.fail_open else "fail_closed"
        metrics.decided(endpoint, checks[0][0].scope, outcome, perf_counter() - started)

    def _outage(self, message: str, exc_info: BaseException | None = None) -> None:
        """Warn that Redis failed a request, and count it for the recovery line."""
        with self._warning_lock:
            self._failing = True
            self._failed_requests += 1
        self._warn(message, exc_info=exc_info)

    def _recovered(self) -> None:
        """Redis decided a request after failing some: log it once, and
        forget the outage's counts, so that the next outage's warnings
        count its own failures only. The time of the next warning is kept:
        a Redis that fails every other request still warns once per
        :data:`WARNING_INTERVAL` at most."""
        with self._warning_lock:
            if not self._failing:
                return  # another thread logged it
            failed, self._failing, self._failed_requests = self._failed_requests, False, 0
            for kind, (next_warning, _unwarned) in self._warnings.items():
                if kind in _OUTAGE_WARNINGS:
                    self._warnings[kind] = (next_warning, 0)
        assert self.throttle is not None
        logger.info(
            "rate limit storage %s recovered: it decides requests again, after failing %d",
            self.throttle.storage.url,
            failed,
        )

    def _warn(self, message: str, kind: str = "storage", exc_info: BaseException | None = None) -> None:
        """Log a warning, at most once per :data:`WARNING_INTERVAL` for each
        kind, with ``exc_info``'s traceback if given, and how many of its
        kind were left out since the last one, if any were."""
        with self._warning_lock:
            now = self.clock()
            next_warning, unwarned = self._warnings.get(kind, (0.0, 0))
            if now < next_warning:
                self._warnings[kind] = (next_warning, unwarned + 1)
                return
            self._warnings[kind] = (now + WARNING_INTERVAL, 0)
        if unwarned:
            logger.warning(
                "%s. %d similar warning(s) were not logged since the last one.", message, unwarned, exc_info=exc_info
            )
        else:
            logger.warning("%s.", message, exc_info=exc_info)

    def announce(self) -> None:
        """Log the one start-up line: the storage (password redacted), the
        strategy, and how many endpoints are limited.

        Called at the app's first request, not by ``init_app``: the app may
        register views and blueprints after it, and they count. Each
        process logs it once (each gunicorn worker, say).
        """
        with self._warning_lock:
            if self._announced:
                return
            self._announced = True
        settings = self.settings
        where = self.throttle.storage.url if self.throttle is not None else "none (RATELIMIT_ENABLED is False)"
        try:
            endpoints = str(len(self.limited_endpoints()))
        except Exception:  # a bad limit: its own endpoint's requests will say what is wrong
            endpoints = "an unknown number of"
        logger.info(
            "flask-redis-throttle: storage %s, strategy %s, %s limited endpoint(s); %s when the storage is unavailable",
            where,
            settings.strategy,
            endpoints,
            "fallback in memory" if settings.fallback else "fail open" if settings.fail_open else "fail closed (503)",
        )

    def limited_endpoints(self) -> set[str]:
        """The endpoints of the app that have a limit for some method."""
        return {
            rule.endpoint
            for rule in self.app.url_map.iter_rules()
            for method in rule.methods or ()
            if self.plan(rule.endpoint, method) is not None
        }

    def breaker_added(self, name: str) -> None:
        """A breaker now guards ``name``: export it as up."""
        if self.metrics is not None:
            self.metrics.node(name, True)

    def breaker_opened(self, name: str, failures: int, period: float) -> None:
        """Log the breaker of ``name`` opening, and export it as down."""
        breaker_logger.warning(
            "circuit breaker opened for %s after %d failure(s) in a row: not calling it for %.1f s, then probing it",
            name,
            failures,
            period,
        )
        if self.metrics is not None:
            self.metrics.node(name, False)

    def breaker_closed(self, name: str, failures: int) -> None:
        """Log the breaker of ``name`` closing, and export it as up."""
        breaker_logger.info(
            "circuit breaker closed for %s: it answered a probe after %d failure(s) in a row", name, failures
        )
        if self.metrics is not None:
            self.metrics.node(name, True)


#: The kinds of warning that an outage of Redis causes; recovery resets their counts.
_OUTAGE_WARNINGS = frozenset(["storage", "refusal log"])


def _outcome(decision: Decision, shadow: bool) -> str:
    """The ``outcome`` label of a decision Redis, the block cache or the fallback made."""
    if decision.fallback:
        return "fallback"
    if decision.admitted:
        return "admitted"
    if shadow:
        return "shadow_refused"
    return "blocked_in_process" if decision.cached else "refused"


def _limit_of(policy: Policy, batch: Batch) -> PlannedLimit | None:
    """The limit of ``batch`` whose check has ``policy``."""
    for limit, (checked, _) in zip(batch.limits, batch.checks, strict=True):
        if checked is policy:
            return limit
    return None


class _OverQuota(NamedTuple):
    """A layer whose whole quota is less than a request's cost."""

    policy: Policy
    layer: Layer
    #: The first identity the layer counts, to name in the 429 and the hooks.
    identity: Identity
    cost: int


def _over_quota(checks: Sequence[Check], cost: int) -> _OverQuota | None:
    """The first layer of ``checks`` whose whole quota is less than ``cost``:
    a request of that cost can never pass it, whatever it waits. A fixed cost
    is checked against fixed limits when decorating; this catches a cost
    function's value, or a fixed cost over a dynamic limit's quota."""
    for policy, identities in checks:
        for layer in policy.layers:
            if layer.quota < cost:
                return _OverQuota(policy, layer, identities[0], cost)
    return None


def _at_cost(inspected: Decision, cost: int) -> Decision:
    """What an inspection at cost 0 says of a request of ``cost``: refused
    if it fits at cost 0 but not at its real cost; it will fit, at the
    latest, once the counter is back to full."""
    if inspected.admitted and inspected.remaining < cost:
        return dataclasses.replace(inspected, admitted=False, retry_after=inspected.reset)
    return inspected


def _tighter(first: Decision, second: Decision) -> Decision:
    """Of two decisions, the one the headers should show, chosen as the script
    chooses its deciding counter: a refusal over an admission, then the
    longest wait, or the least quota left and the later reset."""
    if first.admitted != second.admitted:
        return second if first.admitted else first
    if not first.admitted:
        return second if second.retry_after > first.retry_after else first
    if second.remaining != first.remaining:
        return second if second.remaining < first.remaining else first
    return second if second.reset > first.reset else first


def _throttle(storage: Storage, settings: Settings, listener: BreakerListener | None = None) -> Throttle:
    """The core decider for ``storage``, with the block cache, breaker and
    fallback the settings ask for; ``listener`` is told of the breakers'
    opening and closing."""
    blocks = BlockCache(settings.block_cache_size) if settings.block_cache_size else None
    breaker = None
    if settings.breaker_threshold:
        breaker = CircuitBreaker(
            settings.breaker_threshold,
            settings.breaker_backoff,
            settings.breaker_max_backoff,
            name=storage.url,
            listener=listener,
        )
    fallback = None
    if settings.fallback:
        fallback = Throttle(Storage(embedded_client(warn=False), "memory://"), settings.key_prefix, settings.key_secret)
    return Throttle(storage, settings.key_prefix, settings.key_secret, blocks, breaker, fallback)


def refusal_log(app: Flask | None = None) -> RefusalLog:
    """The refusal log of ``app``, or of the current app.

    :raises RuntimeError: if the extension is not set up on the app, or is
        disabled, or keeps no log (``RATELIMIT_REFUSAL_LOG_SIZE = 0``).
    """
    app = app or current_app
    state: RateLimitState | None = app.extensions.get(EXTENSION_KEY)
    if state is None or state.refusals is None:
        raise RuntimeError("this app keeps no refusal log: set up RateLimit with RATELIMIT_REFUSAL_LOG_SIZE above 0")
    return state.refusals
