"""Flask-Limiter's ``Limiter`` over :class:`~flask_redis_throttle.RateLimit`; nothing here decides a request."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
import weakref
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from email.utils import formatdate
from typing import TYPE_CHECKING, Any, TypedDict

from flask import Blueprint, Flask, Response, g, request
from werkzeug.http import parse_date
from werkzeug.local import LocalProxy

from ...core.engine.keys import Identity
from ...core.engine.rates import Layer
from ...core.storages.clients import embedded_client
from ...current import current_limit, current_limits
from ...decorators import exempt as native_exempt
from ...errors import ConfigurationError
from ...extension import APPLICATION_SCOPE, DEFAULTS, EXTENSION_KEY, RateLimit, RateLimitState, Settings, state_of
from ...signals import request_refused
from ._limits import BREACH_ERROR, SEE, Limit, MetaLimit, RequestLimit, RouteLimit, Target, logger, of_request
from ._settings import LAYERED, THEIR_SETTINGS, settings, unsupported
from .commands import COMMAND_NAMES, cli
from .constants import ConfigVars, ExemptionScope, HeaderNames

if TYPE_CHECKING:
    from typing_extensions import Unpack


#: The flag that drops each kind of inherited limit of :func:`flask_redis_throttle.exempt`.
EXEMPTION = dict(
    default=ExemptionScope.DEFAULT, application=ExemptionScope.APPLICATION, blueprints=ExemptionScope.ANCESTORS
)


#: What a second Limiter on an app may give: its limits, their options (not on_meta_breach), whom they count.
JOINED = frozenset({ConfigVars.KEY_FUNC, ConfigVars.KEY_PREFIX, *LAYERED, *ChainMap(*LAYERED.values())}) - {
    ConfigVars.ON_META_BREACH
}
#: What it adds to the first's settings.
OWN = {"RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION", "RATELIMIT_META", "RATELIMIT_IDENTITIES"}


class LimitArguments(TypedDict, total=False):
    key_func: Callable[[], str] | None
    per_method: bool
    methods: list[str] | None
    error_message: str | Callable[[], str] | None
    exempt_when: Callable[[], bool] | None
    override_defaults: bool
    deduct_when: Callable[[Response], bool] | None
    on_breach: Callable[[RequestLimit], Response | None] | None
    cost: int | Callable[[], int]
    meta_limits: Sequence[str | Callable[[], str] | MetaLimit] | None


class Limiter:
    """Flask-Limiter 4.x's ``Limiter`` (:doc:`/flask-limiter`); an argument with no counterpart: ConfigurationError."""

    def __init__(
        self,
        key_func: Callable[[], str],
        *,
        app: Flask | None = None,
        default_limits: Sequence[str | Callable[[], str] | Limit] | None = None,
        default_limits_per_method: bool | None = None,
        default_limits_exempt_when: Callable[[], bool] | None = None,
        default_limits_deduct_when: Callable[[Response], bool] | None = None,
        default_limits_cost: int | Callable[[], int] | None = None,
        application_limits: Sequence[str | Callable[[], str] | Limit] | None = None,
        application_limits_per_method: bool | None = None,
        application_limits_exempt_when: Callable[[], bool] | None = None,
        application_limits_deduct_when: Callable[[Response], bool] | None = None,
        application_limits_cost: int | Callable[[], int] | None = None,
        headers_enabled: bool | None = None,
        header_name_mapping: Mapping[HeaderNames, str] | None = None,
        strategy: str | None = None,
        storage_uri: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        auto_check: bool = True,
        swallow_errors: bool | None = None,
        fail_on_first_breach: bool | None = None,
        on_breach: Callable[[RequestLimit], Response | None] | None = None,
        meta_limits: Sequence[str | Callable[[], str] | MetaLimit] | None = None,
        on_meta_breach: Callable[[RequestLimit], Response | None] | None = None,
        in_memory_fallback: Sequence[str] | None = None,
        in_memory_fallback_enabled: bool | None = None,
        retry_after: str | None = None,
        key_prefix: str = "",
        request_identifier: Callable[..., str] | None = None,
        enabled: bool = True,
    ) -> None:
        self.key_func = key_func
        self.enabled = enabled
        given = dict(locals(), header_retry_after_value=retry_after, key_prefix=key_prefix or None)
        self.arguments: dict[str, Any] = {  # by setting name, over the app's config; an empty list of limits is none
            getattr(ConfigVars, name.upper()): value or None if isinstance(value, (list, tuple)) else value
            for name, value in given.items()
            if name != "enabled" and hasattr(ConfigVars, name.upper())
        }
        self.header_name_mapping = header_name_mapping or {}
        self.auto_check = auto_check
        self.logger = logger
        self.extension = RateLimit()
        self.apps: weakref.WeakSet[Flask] = weakref.WeakSet()
        self.extension.request_filter(lambda request: not self.enabled)
        if app:  # a proxy bound to no app (current_app outside an app context) is no app yet
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """``RateLimit.init_app`` with our settings for Flask-Limiter's; a failure leaves the app's config as it was."""
        app = app._get_current_object() if isinstance(app, LocalProxy) else app  # kept weakly, read later
        config = app.config
        before = dict(config)
        self.enabled = config.setdefault(ConfigVars.ENABLED, self.enabled)
        first = next((other for other in app.extensions.get("limiter", ()) if isinstance(other, Limiter)), None)
        if first is not None and EXTENSION_KEY in app.extensions:
            self._join(app, first)
            return
        try:
            if not self.auto_check:
                raise unsupported("Limiter(auto_check=False)", False, "True: every request is decided before its view")
            given = ChainMap({key: value for key, value in self.arguments.items() if value is not None}, config).get
            ours = settings(given, self.header_name_mapping)
            storage_uri, swallow_errors = given(ConfigVars.STORAGE_URI), bool(given(ConfigVars.SWALLOW_ERRORS))
            for key in THEIR_SETTINGS:  # read: hidden from the extension's check of unknown keys
                config.pop(key, None)
            config.update(ours)
            # Every setting checked before the warning (an error under -W error), on a copy: nothing logged twice.
            Settings.from_config({key: value for key, value in config.items() if key in DEFAULTS})
            if not storage_uri:  # with warnings.warn, as Flask-Limiter
                warnings.warn(
                    "no storage_uri was given, so rate limits are counted in memory://, by each worker process "
                    "on its own; give storage_uri a Redis URL in production",
                    UserWarning,
                    stacklevel=2,
                )
            # The embedded store made here, so that the extension does not log its own warning about it.
            self.extension.redis = embedded_client(warn=False) if ours["RATELIMIT_STORAGE_URL"] == "memory://" else None
            self.extension.init_app(app)  # the last step that may fail
        except BaseException:
            config.clear()
            config.update(before)
            raise
        config.update({key: before[key] for key in THEIR_SETTINGS & before.keys()})
        # Flask-Limiter's log lines instead of the extension's start-up line, its Retry-After and on_breach errors.
        state_of(app).skip_announcement()

        @request_refused.connect_via(app)
        def log(sender: Flask, *, identity: Identity, layer: Layer, scope: str, shadow: bool, **extra: Any) -> None:
            if not shadow:
                logger.info("ratelimit %s (%s) exceeded at endpoint: %s", layer, identity.value, scope)

        http_date = ours.get("RATELIMIT_RETRY_AFTER") == "http-date"
        app.after_request(respond(ours["RATELIMIT_HEADERS_ENABLED"], http_date, swallow_errors))
        for name in COMMAND_NAMES:  # as Flask-Limiter's entry point gives its own
            if name not in app.cli.commands:
                app.cli.add_command(cli, name)
        app.extensions.setdefault("limiter", set()).add(self)
        self.apps.add(app)

    def _join(self, app: Flask, first: Limiter) -> None:
        """Join ``first``'s extension (one script call decides all); ConfigurationError for the first's arguments."""
        for key, value in self.arguments.items():
            if value is not None and key not in JOINED:
                raise ConfigurationError(key, value, f"None: a second Limiter on an app shares the first's ({SEE})")
        if self.header_name_mapping or not self.auto_check:
            raise ConfigurationError("header_name_mapping", self.header_name_mapping, "the first Limiter's")
        state: RateLimitState = state_of(app)
        ours = settings(self.arguments.get, {})
        taken = len(state.settings.application)
        for position, item in enumerate(ours["RATELIMIT_APPLICATION"] or (), taken + 1):  # the first's start at @app
            item.setdefault("scope", f"{APPLICATION_SCOPE}+{position}")
        own = Settings.from_config({key: ours[key] for key in OWN})

        joined = {  # each of its limits counting whom its key_func names, unless it says
            kind: getattr(state.settings, kind)
            + tuple(
                dataclasses.replace(spec, identities=spec.identities or own.identities) for spec in getattr(own, kind)
            )
            for kind in ("default", "application", "meta")
        }
        state.settings = dataclasses.replace(state.settings, **joined)
        state.forget_plans()
        first.extension.filters.extend(self.extension.filters[1:])  # its request filters, but not its switch
        self.extension = first.extension
        app.extensions["limiter"].add(self)
        self.apps.add(app)

    def limit(
        self,
        limit_value: str | Callable[[], str],
        *,
        scope: str | Callable[[str], str] | None = None,
        **options: Unpack[LimitArguments],
    ) -> RouteLimit:
        """:func:`flask_redis_throttle.limit`; a ``scope`` counts within the endpoint."""
        return RouteLimit(limit_value, limiter=self, scope=scope, **options)

    def shared_limit(
        self, limit_value: str | Callable[[], str], scope: str | Callable[[str], str], **options: Unpack[LimitArguments]
    ) -> RouteLimit:
        """A limit whose counters every view given the same ``scope`` shares."""
        return RouteLimit(limit_value, limiter=self, scope=scope, shared=True, **options)

    def exempt(
        self,
        obj: Target | None = None,
        *,
        flags: ExemptionScope = ExemptionScope.APPLICATION | ExemptionScope.DEFAULT | ExemptionScope.META,
    ) -> Any:
        """:func:`flask_redis_throttle.exempt`, keeping what ``flags`` leave out."""
        keep = [kind for kind, flag in EXEMPTION.items() if flag not in flags]
        nested = ExemptionScope.DESCENDENTS in flags
        inherited = native_exempt(keep=keep, nested=nested)  # refuses flags that drop nothing
        own = native_exempt(keep=keep, nested=nested, own_limits=True)

        def decorate(target: Target) -> Target:
            return (inherited if isinstance(target, Blueprint) else own)(target)

        return decorate if obj is None else decorate(obj)

    def forget_plans(self) -> None:
        """Have this limiter's apps read their limits again: one put on a view at run time applies."""
        for app in self.apps:  # each added once its extension was set up
            state_of(app).forget_plans()

    def request_filter(self, fn: Callable[[], bool]) -> Callable[[], bool]:
        """Leave the requests for which ``fn()`` is True unlimited."""
        self.extension.request_filter(of_request(fn))
        return fn

    @property
    def current_limit(self) -> RequestLimit | None:
        found = current_limit()
        return None if found is None else RequestLimit.of(found, request.endpoint)

    @property
    def current_limits(self) -> list[RequestLimit]:
        return [RequestLimit.of(found, request.endpoint) for found in current_limits()]

    def check(self) -> None:
        """Refused: the extension decides every request before its view; see ``auto_check``."""
        raise NotImplementedError(
            "limiter.check() is not supported: every request is decided before its view; "
            f"flask_redis_throttle.check() tells whether it would pass without counting it ({SEE})"
        )

    def reset(self) -> None:
        """Delete every counter of the app: :meth:`RateLimit.reset() <flask_redis_throttle.RateLimit.reset>`."""
        self.extension.reset()


def respond(headers: bool, http_date: bool, swallow_errors: bool) -> Callable[[Response], Response]:
    """The after_request run before the extension's: raises an on_breach error, sets a passed response's Retry-After."""

    def after_request(response: Response) -> Response:
        error: Exception | None = g.pop(BREACH_ERROR, None)
        if error is not None:
            if not swallow_errors:
                raise error
            logger.error("on_breach callback failed with error %s", error, exc_info=error)
        found = current_limit() if headers else None
        if found is not None and not found.breached:
            now = time.time()
            reset_at: float = math.ceil(now + found.reset)  # as X-RateLimit-Reset: whole seconds, rounded up
            own = response.headers.getlist("Retry-After")
            if own:
                reset_at = max(reset_at, _retry_at(own[-1], now))
            value = formatdate(reset_at, usegmt=True) if http_date else str(int(reset_at - now))
            response.headers.set("Retry-After", value)
        return response

    return after_request


def _retry_at(value: str, now: float) -> float:
    """The moment an app's own ``Retry-After`` names (seconds or an HTTP-date); 0 if it is neither."""
    if value.isdigit():
        return now + int(value)
    moment = parse_date(value)
    return 0 if moment is None else moment.timestamp()
