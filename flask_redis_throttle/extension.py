"""The Flask glue: :class:`RateLimit` installs on each app a
:class:`~flask_redis_throttle._request.state.RateLimitState` with the request
hooks, and gives operators' calls (reset, overrides) in Python."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypedDict

from flask import Flask

from ._ops.metrics import metrics_for
from ._ops.override_changes import DISABLED, latest_changes, lift, overrides_of, set_override
from ._request.config import APPLICATION_SCOPE, DEFAULTS, Settings
from ._request.identity import parse_identity
from ._request.plan import PlannedLimit, qualified_name
from ._request.state import RateLimitState, RequestFilter
from .core.engine.keys import Identity
from .core.engine.throttle import StorageUnavailable
from .core.storages.storage import STORAGE_ERRORS
from .core.stores.overrides import Change, Override
from .core.stores.refusals import RefusalLog
from .current import current_limit
from .decorators import EXTENSION_KEY, state_of

# At run time too, so that typing.get_type_hints() resolves the options.
if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack
if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class OverrideOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`RateLimit.override`, ``allow`` and ``block``."""

    scope: str | None
    until: object
    duration: object
    by: str
    app: Flask | None


__all__ = [
    "APPLICATION_SCOPE",
    "DEFAULTS",
    "EXTENSION_KEY",
    "PlannedLimit",
    "RateLimit",
    "RateLimitState",
    "Settings",
    "near_limit_log",
    "qualified_name",
    "refusal_log",
    "state_of",
]


class RateLimit:
    """The extension: ``RateLimit(app)``, or ``RateLimit()`` then :meth:`init_app`. Each app's state lives in
    ``app.extensions``, so one instance can serve many apps.

    :param app: the app to set up at once, if any.
    :param redis: a Redis, Sentinel or cluster client to use instead of ``RATELIMIT_STORAGE_URL`` (:doc:`/deployment`).
    :param metrics: export Prometheus metrics: True for the default registry, or a registry (:doc:`/operations`).
    :raises ImportError: if ``metrics`` is on and ``prometheus_client`` is not installed.
    """

    def __init__(
        self, app: Flask | None = None, *, redis: Any = None, metrics: bool | CollectorRegistry = False
    ) -> None:
        self.redis = redis
        #: The metrics every app of this instance records, or None.
        self.metrics = None if metrics is False else metrics_for(None if metrics is True else metrics)
        #: The functions of :meth:`request_filter`, shared by every app this instance serves.
        self.filters: list[RequestFilter] = []
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set up rate limiting on ``app``.

        Reads these settings once, filling in their defaults (see :doc:`/config`): ``RATELIMIT_ENABLED``,
        ``RATELIMIT_STORAGE_URL``, ``RATELIMIT_STORAGE_OPTIONS``, ``RATELIMIT_KEY_PREFIX``, ``RATELIMIT_DEFAULT``,
        ``RATELIMIT_DEFAULT_MODE``, ``RATELIMIT_BLUEPRINT_MODE``, ``RATELIMIT_APPLICATION``, ``RATELIMIT_META``,
        ``RATELIMIT_HEADERS_ENABLED``, ``RATELIMIT_HEADERS_LEGACY``, ``RATELIMIT_HEADER_NAMES``,
        ``RATELIMIT_RETRY_AFTER``, ``RATELIMIT_FAIL_OPEN``, ``RATELIMIT_IDENTITIES``, ``RATELIMIT_IPV6_PREFIX``,
        ``RATELIMIT_KEY_SECRET``, ``RATELIMIT_STRATEGY``, ``RATELIMIT_REFUSAL_LOG_SIZE``,
        ``RATELIMIT_BLOCK_CACHE_SIZE``, ``RATELIMIT_BREAKER_THRESHOLD``, ``RATELIMIT_BREAKER_BACKOFF``,
        ``RATELIMIT_BREAKER_MAX_BACKOFF``, ``RATELIMIT_FALLBACK``, ``RATELIMIT_SHADOW``, ``RATELIMIT_ON_BREACH``,
        ``RATELIMIT_HEADERS_DRAFT``, ``RATELIMIT_HEADERS_PARTITION_KEY``, ``RATELIMIT_NEAR_LIMIT``,
        ``RATELIMIT_OVERRIDE_BLOCK_STATUS``, ``RATELIMIT_OVERRIDE_WIDEST_IPV4``, ``RATELIMIT_OVERRIDE_WIDEST_IPV6`` and
        ``RATELIMIT_CONCURRENCY_LEASE``.

        It adds :func:`~flask_redis_throttle.current_limit` to the templates' globals, and sends nothing to Redis,
        so an app starts while Redis is down.

        :raises RuntimeError: if the extension is already set up on ``app``.
        :raises ConfigurationError: if a setting has a bad value.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError("flask-redis-throttle is already set up on this app; call init_app once per app")
        settings = Settings.from_config(app.config)
        state = RateLimitState(app, settings, self.filters, self.redis, self.metrics)
        # First, as Flask refuses it on an app that has served: no state left behind.
        app.add_template_global(current_limit, "current_limit")
        if settings.enabled:
            app.before_request(state.before_request)
            app.after_request(state.after_request)
        app.extensions[EXTENSION_KEY] = state

    def reset(
        self, identity: str | Identity | None = None, *, scope: str | None = None, app: Flask | None = None
    ) -> int:
        """Delete an identity's counters and penalties, or everyone's, in every scope or in ``scope``, as
        ``flask ratelimit reset`` does (:doc:`/cli`). Other processes' block caches may go on refusing the
        identity for up to a second.

        :param identity: ``ip:<address>``, ``user:<id>``, ``key:<function>:<value>``, an :class:`Identity`, or None.
        :param scope: only this scope's counters (:ref:`scopes`); None for every scope.
        :param app: the app; by default the current app.
        :returns: how many keys were deleted.
        :raises ValueError: if ``identity`` names no identity, or ``scope`` is empty.
        :raises RuntimeError: if the extension is not set up on the app, or is disabled.
        :raises StorageUnavailable: if Redis could not answer; keys deleted before stay deleted.
        """
        state: RateLimitState = state_of(app)
        if state.throttle is None:
            raise RuntimeError(DISABLED)
        _check_scope(scope)
        if identity is not None and not isinstance(identity, Identity):
            identity = parse_identity(identity, state.settings.ipv6_prefix)
        try:
            return state.throttle.reset(identity, [scope])
        except STORAGE_ERRORS as error:
            raise StorageUnavailable(f"{state.throttle.url}: {error}") from error

    def override(self, identity: str | Identity, limit: str, **options: Unpack[OverrideOptions]) -> Override:
        """Decide ``identity`` against other layers, on ``scope`` or on every scope, until a time or for a while,
        in every worker within a second (:doc:`/overrides`). It replaces any override of the same identity and scope.

        :param identity: as the CLI writes it, or an IP network such as ``ip:203.0.113.0/24``.
        :param limit: the layers, such as ``"100/s;10000/h"``.
        :param scope: a scope of the app's limits (:ref:`scopes`); None for every scope.
        :param until: when it ends: a :class:`~datetime.datetime` (naive is UTC), epoch seconds or an ISO time.
        :param duration: or for how long: a :class:`~datetime.timedelta`, seconds, or a span such as ``"2h"``.
        :param by: who set it, for the log of changes.
        :param app: the app; by default the current app.
        :returns: the override stored.
        :raises ValueError: naming what is wrong, with nothing stored.
        :raises RuntimeError: if the extension is not set up on the app, or is disabled.
        :raises StorageUnavailable: if Redis could not answer; if it timed out, the change may still be made.
        """
        return self._set("limit", identity, limit, **options)

    def allow(self, identity: str | Identity, **options: Unpack[OverrideOptions]) -> Override:
        """Let ``identity`` through unlimited; the arguments are :meth:`override`'s."""
        return self._set("allow", identity, None, **options)

    def block(self, identity: str | Identity, **options: Unpack[OverrideOptions]) -> Override:
        """Refuse ``identity``'s requests without asking Redis, with 429 (or ``RATELIMIT_OVERRIDE_BLOCK_STATUS``);
        the arguments are :meth:`override`'s."""
        return self._set("block", identity, None, **options)

    def remove_overrides(
        self,
        identity: str | Identity | None = None,
        *,
        scope: str | None = None,
        by: str = "python",
        app: Flask | None = None,
    ) -> list[Override]:
        """Remove ``identity``'s overrides (everyone's if None): on every scope, or only the one on ``scope``.

        :returns: the overrides removed.
        :raises ValueError: if ``identity`` names no identity or network, or ``scope`` or ``by`` is no string.
        """
        _check_scope(scope)
        _check_by(by)
        return lift(state_of(app), identity, scope, scope is None, by)

    def overrides(self, *, app: Flask | None = None) -> list[Override]:
        """The overrides in force, read from storage now."""
        return list(overrides_of(state_of(app)).table().overrides)

    def override_changes(self, count: int = 20, *, app: Flask | None = None) -> list[Change]:
        """The latest changes of the overrides, newest first: who, what, until when."""
        return latest_changes(state_of(app), count)

    def _set(
        self, action: str, identity: str | Identity, limit: str | None, *, by: str = "python", **options: Any
    ) -> Override:
        # An unknown option is a TypeError from set_override, which takes the others by name.
        _check_by(by)
        return set_override(state_of(options.pop("app", None)), action, identity, limit, by=by, **options)

    def request_filter(self, function: RequestFilter) -> RequestFilter:
        """Register a function of the request that, when it returns True, leaves the request unlimited: not
        counted, not refused, no headers (:ref:`filters`). It applies to every app of this instance.

        :raises TypeError: if ``function`` is not callable.
        """
        if not callable(function):
            raise TypeError(f"request_filter() takes a function of the request, not {function!r}")
        self.filters.append(function)
        return function


def _check_scope(scope: object) -> None:
    if scope is not None and (not isinstance(scope, str) or not scope):
        raise ValueError(f"scope {scope!r} must be a non-empty string, or None for every scope")


def _check_by(by: object) -> None:
    if not isinstance(by, str):
        raise ValueError(f"by {by!r} must be a string: who made the change, for the log of changes")


def refusal_log(app: Flask | None = None) -> RefusalLog:
    """The refusal log of ``app``, or of the current app.

    :raises RuntimeError: if the extension is not set up on the app, or is disabled, or keeps no log
        (``RATELIMIT_REFUSAL_LOG_SIZE = 0``).
    """
    return _kept(state_of(app).refusals, "refusal log", "RATELIMIT_REFUSAL_LOG_SIZE above 0")


def near_limit_log(app: Flask | None = None) -> RefusalLog:
    """The near-limit log of ``app``, or of the current app (:ref:`near-limit`).

    :raises RuntimeError: if the extension is not set up on the app, or is disabled, or keeps no log
        (``RATELIMIT_NEAR_LIMIT = None`` or ``RATELIMIT_REFUSAL_LOG_SIZE = 0``).
    """
    return _kept(
        state_of(app).near_limits, "near-limit log", "RATELIMIT_NEAR_LIMIT and RATELIMIT_REFUSAL_LOG_SIZE above 0"
    )


def _kept(log: RefusalLog | None, name: str, settings: str) -> RefusalLog:
    if log is None:
        raise RuntimeError(f"this app keeps no {name}: set up RateLimit with {settings}")
    return log
