"""The Flask glue: :class:`RateLimit`, and the per-app state it installs.

A request's path through it:

1. ``before_request`` finds the view's :class:`_Plan`, compiled once per
   endpoint from its ``@limit`` decorators (or ``RATELIMIT_DEFAULT``);
2. the plan's resolvers name the request's identities;
3. :meth:`Throttle.hit <flask_redis_throttle.throttle.Throttle.hit>` decides
   every layer of every identity in one script call;
4. a refusal raises :class:`~flask_redis_throttle.RateLimitExceeded` (429);
5. ``after_request`` adds the ``RateLimit`` headers, to the view's response
   or to the 429, from that same script reply.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from flask import Flask, Request, Response, current_app, g, request
from werkzeug.exceptions import ServiceUnavailable

from .blocks import BlockCache
from .cli import ratelimit as ratelimit_cli
from .config import Settings
from .decorators import LIMITS_ATTRIBUTE, LimitSpec
from .errors import RateLimitExceeded
from .headers import policy_header, state_header
from .identity import IdentitySpec, Resolver, resolvers
from .refusals import RefusalLog
from .storage import Storage
from .throttle import Check, Decision, Policy, StorageUnavailable, Throttle

__all__ = ["EXTENSION_KEY", "RateLimit", "RateLimitState", "refusal_log"]

logger = logging.getLogger("flask_redis_throttle")

#: The key of this extension's state in ``app.extensions``.
EXTENSION_KEY = "ratelimit"

#: The shortest gap between two "storage unavailable" warnings, in seconds.
WARNING_INTERVAL = 10.0


class RateLimit:
    """The extension. ``RateLimit(app)``, or ``RateLimit()`` then :meth:`init_app`.

    It keeps no app of its own: each app's settings and storage live in
    ``app.extensions["ratelimit"]``, so one instance can serve many apps.

    :param app: the app to set up at once, if any.
    """

    def __init__(self, app: Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set up rate limiting on ``app``.

        Reads these settings once, filling in their defaults (see :doc:`/config`):
        ``RATELIMIT_ENABLED``, ``RATELIMIT_STORAGE_URL``,
        ``RATELIMIT_STORAGE_OPTIONS``, ``RATELIMIT_KEY_PREFIX``,
        ``RATELIMIT_DEFAULT``, ``RATELIMIT_HEADERS_ENABLED``,
        ``RATELIMIT_FAIL_OPEN``, ``RATELIMIT_IDENTITIES``,
        ``RATELIMIT_IPV6_PREFIX``, ``RATELIMIT_KEY_SECRET``,
        ``RATELIMIT_STRATEGY``, ``RATELIMIT_REFUSAL_LOG_SIZE`` and
        ``RATELIMIT_BLOCK_CACHE_SIZE``.

        It also adds the ``flask ratelimit`` commands to the app (see :doc:`/cli`).
        Nothing is sent to Redis here, so an app starts even while Redis is down.

        :raises RuntimeError: if the extension is already set up on ``app``.
        :raises ConfigurationError: if a setting has a bad value.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError("flask-redis-throttle is already set up on this app; call init_app once per app")
        settings = Settings.from_config(app.config)
        state = RateLimitState(app, settings)
        app.extensions[EXTENSION_KEY] = state
        app.cli.add_command(ratelimit_cli)
        if settings.enabled:
            app.before_request(state.before_request)
            app.after_request(state.after_request)


@dataclass(frozen=True)
class _Plan:
    """What one endpoint needs per request, worked out on its first request."""

    limits: tuple[tuple[Policy, tuple[Resolver, ...]], ...]
    #: The ``RateLimit-Policy`` header value, the same on every response.
    policy_header: str
    #: The header name of each layer, by (policy id, window in seconds).
    names: dict[tuple[int, int], str]
    #: The identities of each limit as written (built-in names and key
    #: functions), in the order of ``limits``.
    identities: tuple[tuple[IdentitySpec, ...], ...]


class RateLimitState:
    """The rate limiting state of one app, found at ``app.extensions["ratelimit"]``.

    :param app: the app.
    :param settings: its validated settings.
    """

    def __init__(self, app: Flask, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        #: The core decider; tests may override its ``now`` to pin time. When
        #: ``RATELIMIT_ENABLED`` is off there is none, and no storage either.
        self.throttle: Throttle | None = None
        #: Who hit the limits (see :doc:`/refusals`); None when disabled.
        self.refusals: RefusalLog | None = None
        if settings.enabled:
            storage = Storage.from_url(settings.storage_url, settings.storage_options)
            blocks = BlockCache(settings.block_cache_size) if settings.block_cache_size else None
            self.throttle = Throttle(storage, settings.key_prefix, settings.key_secret, blocks)
            if settings.refusal_log_size:
                key = settings.key_prefix + "refusals"
                self.refusals = RefusalLog(storage.client, key, settings.refusal_log_size)
        self._plans: dict[str | None, _Plan | None] = {}
        self._warning_lock = threading.Lock()
        self._next_warning = 0.0
        self._unwarned = 0

    def before_request(self) -> None:
        """Decide the request; raise :class:`RateLimitExceeded` if it is refused."""
        # This runs before every request: the request is fetched from its
        # context proxy once, and plain loops build the checks.
        req: Request = request._get_current_object()  # type: ignore[attr-defined]
        if req.method == "OPTIONS" and getattr(req.url_rule, "provide_automatic_options", False):
            return  # Flask answers these itself (CORS preflights); they cost nothing
        endpoint = req.endpoint
        try:
            plan = self._plans[endpoint]
        except KeyError:
            plan = self._plans[endpoint] = self._compile(endpoint)
        if plan is None:
            return
        checks: list[Check] = []
        for policy, identity_resolvers in plan.limits:
            identities = []
            for resolve in identity_resolvers:
                identity = resolve(req)
                if identity is not None:
                    identities.append(identity)
            if identities:
                checks.append((policy, identities))
        if not checks or self.throttle is None:
            return
        try:
            decision = self.throttle.hit(checks)
        except StorageUnavailable as error:
            self._storage_unavailable(error)
            return
        g._ratelimit = (plan, decision)
        if not decision.admitted:
            if self.refusals is not None and not decision.cached:
                self._log_refusal(endpoint, checks, decision)
            raise RateLimitExceeded(decision.layer, decision.identity, decision.retry_after, decision.policy.scope)

    def after_request(self, response: Response) -> Response:
        """Add the ``RateLimit`` headers, and ``Retry-After`` to any refusal."""
        outcome: tuple[_Plan, Decision] | None = g.pop("_ratelimit", None)
        if outcome is None:
            return response
        plan, decision = outcome
        if not decision.admitted:
            response.headers.setdefault("Retry-After", str(max(1, math.ceil(decision.retry_after))))
        if self.settings.headers_enabled:
            name = plan.names[id(decision.policy), decision.layer.period]
            response.headers["RateLimit-Policy"] = plan.policy_header
            response.headers["RateLimit"] = state_header(name, decision.remaining, decision.reset)
        return response

    def plan(self, endpoint: str, method: str = "GET") -> _Plan | None:
        """The limits that requests to ``endpoint`` are decided by, compiled
        (and cached) as on its first request; None if it has none.

        Each of the plan's ``limits`` is a
        :class:`~flask_redis_throttle.throttle.Policy` with the resolvers of
        its identities, and ``identities`` holds those identities as written.

        :param endpoint: the endpoint's name; an unknown one has no limits.
        :param method: the request method. Limits are set per endpoint, so
            every method of an endpoint has the same plan.
        """
        try:
            return self._plans[endpoint]
        except KeyError:
            plan = self._plans[endpoint] = self._compile(endpoint)
            return plan

    def _compile(self, endpoint: str | None) -> _Plan | None:
        if endpoint is None or endpoint not in self.app.view_functions:
            return None
        view = self.app.view_functions[endpoint]
        specs: tuple[LimitSpec, ...] | None = getattr(view, LIMITS_ATTRIBUTE, None)
        if specs is None:
            default = self.settings.default
            if default is None or endpoint == "static" or endpoint.endswith(".static"):
                return None
            specs = (LimitSpec("RATELIMIT_DEFAULT", default),)
        limits = []
        written = []
        names: dict[tuple[int, int], str] = {}
        layers = []
        logins = hasattr(self.app, "login_manager")
        for spec in specs:
            policy = Policy(spec.rates, spec.scope or endpoint, spec.strategy or self.settings.strategy)
            identities = resolvers(spec.identities or self.settings.identities, self.settings.ipv6_prefix, logins)
            limits.append((policy, identities))
            written.append(spec.identities or self.settings.identities)
            for rate in spec.rates:
                name = rate.name
                if name in names.values():
                    name = f"{name}-{len(names) + 1}"
                names[id(policy), rate.period] = name
                layers.append((name, rate))
        return _Plan(tuple(limits), policy_header(layers), names, tuple(written))

    def _log_refusal(self, endpoint: str | None, checks: Sequence[Check], decision: Decision) -> None:
        assert self.refusals is not None
        identities = dict.fromkeys(str(identity) for _policy, ids in checks for identity in ids)
        try:
            self.refusals.record(
                endpoint=endpoint or "",
                scope=decision.policy.scope,
                layer=f"{decision.layer.amount}/{decision.layer.name}",
                strategy=decision.policy.strategy,
                identity=str(decision.identity),
                identities=identities,
                retry_after=decision.retry_after,
            )
        except redis.RedisError as error:
            # The refusal stands; only its log entry is lost.
            self._warn(f"refusal log unavailable ({error}); the refusal is not logged")

    def _storage_unavailable(self, error: StorageUnavailable) -> None:
        outcome = "letting requests through" if self.settings.fail_open else "answering 503"
        self._warn(f"rate limit storage unavailable ({error}); {outcome}")
        if not self.settings.fail_open:
            raise ServiceUnavailable("Rate limiting is unavailable; try again shortly.", retry_after=1)

    def _warn(self, message: str) -> None:
        """Log a warning about the storage, at most once per :data:`WARNING_INTERVAL`."""
        with self._warning_lock:
            now = time.monotonic()
            if now < self._next_warning:
                self._unwarned += 1
                warn = False
            else:
                warn, skipped = True, self._unwarned
                self._next_warning, self._unwarned = now + WARNING_INTERVAL, 0
        if warn:
            logger.warning("%s. %d similar failure(s) since the last warning.", message, skipped)


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
