"""Flask-Limiter's ``Limiter``, translated onto :class:`~flask_redis_throttle.RateLimit`.

Nothing here decides a request. ``Limiter.init_app`` writes the
extension's own ``RATELIMIT_*`` settings from Flask-Limiter's arguments and
settings (``_settings.py``), then sets up a
:class:`~flask_redis_throttle.RateLimit`; ``Limiter.limit`` and
``Limiter.exempt`` put the extension's own :func:`~flask_redis_throttle.limit`
and :func:`~flask_redis_throttle.exempt` on the view or blueprint
(``_limits.py``). Flask-Limiter's functions take no argument and read
:data:`flask.request`; the extension's take the request: each is wrapped
once, when it is given, keeping its module and name (key functions count
under that name). What has no counterpart is refused with a clear error
when it is given, never ignored; see :doc:`/flask-limiter`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from flask import Blueprint, Flask, Request, Response, request
from werkzeug.local import LocalProxy

from ...core.storages.clients import embedded_client
from ...core.storages.embedded import EmbeddedRedis
from ...current import current_limit, current_limits
from ...decorators import LimitSpec
from ...decorators import exempt as native_exempt
from ...errors import ConfigurationError
from ...extension import APPLICATION_SCOPE, DEFAULTS, EXTENSION_KEY, RateLimit, RateLimitState, Settings, state_of
from ._limits import SEE, Limit, MetaLimit, RequestLimit, RouteLimit, Target, identities, of_request
from ._presentation import log_refusals, respond
from ._settings import APPLICATION_SETTINGS, DEFAULT_SETTINGS, THEIR_SETTINGS, layered, meta_limits, settings
from .commands import COMMAND_NAMES, cli
from .constants import ConfigVars, ExemptionScope, HeaderNames

if TYPE_CHECKING:  # a string in the annotations, read by type checkers only
    from typing_extensions import Unpack


#: The flag that drops each kind of inherited limit of :func:`flask_redis_throttle.exempt`.
EXEMPTION = {
    "default": ExemptionScope.DEFAULT,
    "application": ExemptionScope.APPLICATION,
    "blueprints": ExemptionScope.ANCESTORS,
}


#: The arguments a second Limiter on an app may give: its own limits, and
#: whom they count. (Its ``key_prefix`` names nothing: its limits count apart
#: from the first's under the first's prefix.)
JOINED = frozenset(
    {
        ConfigVars.KEY_FUNC,
        ConfigVars.KEY_PREFIX,
        ConfigVars.META_LIMITS,
        *DEFAULT_SETTINGS,
        *APPLICATION_SETTINGS,
    }
)


def in_memory(url: str) -> EmbeddedRedis | None:
    """The embedded store of a ``memory://`` app, made here so that the
    extension does not log its warning about it (see :func:`warn_in_memory`)."""
    return embedded_client(warn=False) if url == "memory://" else None


def warn_in_memory(given: str | None) -> None:
    """Warn, with :func:`warnings.warn` as Flask-Limiter does, that an app
    counts in memory:// because it was given no storage."""
    if not given:
        warnings.warn(
            "no storage_uri was given, so rate limits are counted in memory://, by each worker process "
            "on its own; give storage_uri a Redis URL in production",
            UserWarning,
            stacklevel=3,
        )


def the_app(app: Flask) -> Flask:
    """``app`` itself, for a proxy bound to it such as
    :data:`flask.current_app` (as an app factory passes it): the limiter
    keeps the app, weakly, and reads it after the app context is gone.

    :raises RuntimeError: for a proxy bound to nothing, Flask's "Working
        outside of application context".
    """
    return app._get_current_object() if isinstance(app, LocalProxy) else app


class LimitArguments(TypedDict, total=False):
    """The keyword arguments :meth:`Limiter.limit` and :meth:`Limiter.shared_limit` share."""

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
    """Flask-Limiter's ``Limiter``, over :class:`~flask_redis_throttle.RateLimit`.

    It takes Flask-Limiter 4.x's arguments; :doc:`/flask-limiter` says what
    each becomes. One that has no counterpart here raises
    :class:`~flask_redis_throttle.ConfigurationError` at :meth:`init_app`.

    :param key_func: whom to count: a function of no arguments that returns
        a string, such as :func:`~.util.get_remote_address`.
    """

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
        # Flask-Limiter's arguments, by its setting names: an argument given
        # wins over the app's setting, as there.
        self.arguments: dict[str, Any] = {
            ConfigVars.KEY_FUNC: key_func,
            ConfigVars.DEFAULT_LIMITS: default_limits or None,
            ConfigVars.DEFAULT_LIMITS_PER_METHOD: default_limits_per_method,
            ConfigVars.DEFAULT_LIMITS_EXEMPT_WHEN: default_limits_exempt_when,
            ConfigVars.DEFAULT_LIMITS_DEDUCT_WHEN: default_limits_deduct_when,
            ConfigVars.DEFAULT_LIMITS_COST: default_limits_cost,
            ConfigVars.APPLICATION_LIMITS: application_limits or None,
            ConfigVars.APPLICATION_LIMITS_PER_METHOD: application_limits_per_method,
            ConfigVars.APPLICATION_LIMITS_EXEMPT_WHEN: application_limits_exempt_when,
            ConfigVars.APPLICATION_LIMITS_DEDUCT_WHEN: application_limits_deduct_when,
            ConfigVars.APPLICATION_LIMITS_COST: application_limits_cost,
            ConfigVars.HEADERS_ENABLED: headers_enabled,
            ConfigVars.STRATEGY: strategy,
            ConfigVars.STORAGE_URI: storage_uri,
            ConfigVars.STORAGE_OPTIONS: storage_options,
            ConfigVars.SWALLOW_ERRORS: swallow_errors,
            ConfigVars.FAIL_ON_FIRST_BREACH: fail_on_first_breach,
            ConfigVars.ON_BREACH: on_breach,
            ConfigVars.META_LIMITS: meta_limits or None,
            ConfigVars.ON_META_BREACH: on_meta_breach,
            ConfigVars.IN_MEMORY_FALLBACK: in_memory_fallback or None,
            ConfigVars.IN_MEMORY_FALLBACK_ENABLED: in_memory_fallback_enabled,
            ConfigVars.HEADER_RETRY_AFTER_VALUE: retry_after,
            ConfigVars.KEY_PREFIX: key_prefix or None,
            ConfigVars.REQUEST_IDENTIFIER: request_identifier,
        }
        self.header_name_mapping = dict(header_name_mapping or {})
        self.auto_check = auto_check
        #: The extension's logger, where Flask-Limiter's is ``flask-limiter``.
        self.logger = logging.getLogger("flask_redis_throttle")
        #: The extension that decides every request.
        self.extension = RateLimit()
        #: The apps it is set up on.
        self.apps: weakref.WeakSet[Flask] = weakref.WeakSet()
        # ``enabled`` is read at each request, as in Flask-Limiter: an app
        # (or its tests) may switch the limiter off and on at run time.
        self.extension.request_filter(self._switched_off)
        # As Flask-Limiter tests it: a proxy bound to no app (current_app at
        # import time, outside an app context) is no app yet.
        if app:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set up rate limiting on ``app``, or on the app a proxy such as
        :data:`flask.current_app` stands for: the extension's settings from
        this limiter's arguments and Flask-Limiter's settings, then
        :meth:`RateLimit.init_app <flask_redis_throttle.RateLimit.init_app>`.

        One that fails changes nothing: the app's config is as it was, and
        the next ``Limiter`` on the app is its first.

        :raises ConfigurationError: for an argument or setting that has no
            counterpart here, or a bad value.
        :raises RuntimeError: for a proxy bound to no app (outside an app context).
        """
        app = the_app(app)
        config = app.config
        first = next((other for other in app.extensions.get("limiter", ()) if isinstance(other, Limiter)), None)
        if first is not None and EXTENSION_KEY in app.extensions:
            self.enabled = config.setdefault(ConfigVars.ENABLED, self.enabled)
            self._join(app, first)
            return
        before = dict(config)
        try:
            self.enabled = config.setdefault(ConfigVars.ENABLED, self.enabled)
            given = functools.partial(self._given, config)
            ours = settings(given, self.header_name_mapping, self.auto_check)
            storage_uri, swallow_errors = given(ConfigVars.STORAGE_URI), bool(given(ConfigVars.SWALLOW_ERRORS))
            # Flask-Limiter's settings have been read: hidden from the
            # extension's check of unknown keys while it sets up.
            for key in THEIR_SETTINGS:
                config.pop(key, None)
            config.update(ours)
            # Every setting checked before the warning, an error under -W
            # error; on a copy of the known ones, so that nothing is logged twice.
            Settings.from_config({key: value for key, value in config.items() if key in DEFAULTS})
            warn_in_memory(storage_uri)
            self.extension.redis = in_memory(ours["RATELIMIT_STORAGE_URL"])
            # The last step that may fail: after it, nothing does.
            self.extension.init_app(app)
        except BaseException:
            config.clear()
            config.update(before)
            raise
        config.update({key: before[key] for key in THEIR_SETTINGS & before.keys()})
        self._present(app, ours, swallow_errors)
        for name in COMMAND_NAMES:  # as Flask-Limiter's entry point gives its own
            if name not in app.cli.commands:
                app.cli.add_command(cli, name)
        app.extensions.setdefault("limiter", set()).add(self)
        self.apps.add(app)

    def _join(self, app: Flask, first: Limiter) -> None:
        """Add this limiter's default, application and meta limits to the
        extension ``first`` set up on ``app``, so that one script call still
        decides all of them: a second Limiter on an app, as Flask-Limiter
        allows. Its limits count whom its ``key_func`` names, apart from the
        first's (as any two limits of an endpoint do); they share its
        storage, strategy and headers.

        :raises ConfigurationError: for an argument that only the first
            Limiter of an app may give.
        """
        for key, value in self.arguments.items():
            if value is not None and key not in JOINED:
                raise ConfigurationError(key, value, f"None: a second Limiter on an app shares the first's ({SEE})")
        if self.header_name_mapping or not self.auto_check:
            raise ConfigurationError("header_name_mapping", self.header_name_mapping, "the first Limiter's")
        state: RateLimitState = state_of(app)
        given = self.arguments.get
        application = layered(given, *APPLICATION_SETTINGS) or []
        taken = len(state.settings.application)
        for position, item in enumerate(application, taken + 1):  # apart from the first's, which start at @app
            item.setdefault("scope", f"{APPLICATION_SCOPE}+{position}")
        own = Settings.from_config(
            {
                "RATELIMIT_DEFAULT": layered(given, *DEFAULT_SETTINGS),
                "RATELIMIT_APPLICATION": application or None,
                "RATELIMIT_META": meta_limits(given),
                "RATELIMIT_IDENTITIES": identities(self.key_func) or ["ip"],
            }
        )

        def counted(specs: tuple[LimitSpec, ...]) -> tuple[LimitSpec, ...]:
            return tuple(dataclasses.replace(spec, identities=spec.identities or own.identities) for spec in specs)

        state.settings = dataclasses.replace(
            state.settings,
            default=state.settings.default + counted(own.default),
            application=state.settings.application + counted(own.application),
            meta=state.settings.meta + counted(own.meta),
        )
        state.forget_plans()
        # Its request filters, but not its switch: its limits are the first's now.
        first.extension.filters.extend(each for each in self.extension.filters if each != self._switched_off)
        self.extension = first.extension
        app.extensions["limiter"].add(self)
        self.apps.add(app)

    def _switched_off(self, request: Request) -> bool:
        """Whether ``enabled`` is False: a request filter that leaves every
        request unlimited then, without headers."""
        return not self.enabled

    def _present(self, app: Flask, ours: Mapping[str, Any], swallow_errors: bool) -> None:
        """Show ``app``'s decisions as Flask-Limiter does: its log lines
        instead of the extension's start-up line, and its ``Retry-After``
        and ``on_breach`` errors (see ``_presentation.py``)."""
        state = state_of(app)
        state.skip_announcement()
        log_refusals(app)
        http_date = ours.get("RATELIMIT_RETRY_AFTER") == "http-date"
        app.after_request(respond(ours["RATELIMIT_HEADERS_ENABLED"], http_date, swallow_errors))

    def _given(self, config: Mapping[str, Any], key: str) -> Any:
        value = self.arguments.get(key)
        return config.get(key) if value is None else value

    def limit(
        self,
        limit_value: str | Callable[[], str],
        *,
        scope: str | Callable[[str], str] | None = None,
        **options: Unpack[LimitArguments],
    ) -> RouteLimit:
        """Limit a view or a blueprint: :func:`flask_redis_throttle.limit`.

        A ``scope`` here only names the limit, as in Flask-Limiter: its
        counters are still the endpoint's. Use :meth:`shared_limit` to share them.
        """
        return self._route_limit(limit_value, scope, False, options)

    def shared_limit(
        self, limit_value: str | Callable[[], str], scope: str | Callable[[str], str], **options: Unpack[LimitArguments]
    ) -> RouteLimit:
        """A limit whose counters every view given the same ``scope`` shares."""
        return self._route_limit(limit_value, scope, True, options)

    def _route_limit(
        self,
        limit_value: str | Callable[[], str],
        scope: str | Callable[[str], str] | None,
        shared: bool,
        options: LimitArguments,
    ) -> RouteLimit:
        fields: dict[str, Any] = dict(options)
        key_func, override_defaults = fields.pop("key_func", None), fields.pop("override_defaults", True)
        key_function = key_func or self.key_func
        return RouteLimit(
            limit_value, override_defaults, self, key_function=key_function, scope=scope, shared=shared, **fields
        )

    def exempt(
        self,
        obj: Target | None = None,
        *,
        flags: ExemptionScope = ExemptionScope.APPLICATION | ExemptionScope.DEFAULT | ExemptionScope.META,
    ) -> Any:
        """Exempt a view or a blueprint: :func:`flask_redis_throttle.exempt`,
        keeping what ``flags`` leave out.

        :raises ValueError: if ``flags`` drop nothing.
        """
        keep = [kind for kind, flag in EXEMPTION.items() if flag not in flags]
        nested = ExemptionScope.DESCENDENTS in flags
        inherited = native_exempt(keep=keep, nested=nested)  # refuses flags that drop nothing, where written
        # As in Flask-Limiter, an exempt view loses its own limits too.
        own = native_exempt(keep=keep, nested=nested, own_limits=True)

        def decorate(target: Target) -> Target:
            return (inherited if isinstance(target, Blueprint) else own)(target)

        return decorate if obj is None else decorate(obj)

    def forget_plans(self) -> None:
        """Have this limiter's apps read their endpoints' limits again at
        their next request: a limit put on a view at run time applies, as in
        Flask-Limiter, where limits are read at each request."""
        for app in self.apps:
            state = state_of(app, required=False)
            if state is not None:
                state.forget_plans()

    def request_filter(self, fn: Callable[[], bool]) -> Callable[[], bool]:
        """Leave the requests for which ``fn()`` is True unlimited."""
        self.extension.request_filter(of_request(fn))
        return fn

    @property
    def current_limit(self) -> RequestLimit | None:
        """The deciding limit of the current request: :func:`flask_redis_throttle.current_limit`."""

        found = current_limit()
        return None if found is None else RequestLimit.current(found, request.endpoint)

    @property
    def current_limits(self) -> list[RequestLimit]:
        """Every limit of the current request: :func:`flask_redis_throttle.current_limits`."""
        return [RequestLimit.current(found, request.endpoint) for found in current_limits()]

    def check(self) -> None:
        """Refused: the extension decides every request before its view; see ``auto_check``."""
        raise NotImplementedError(
            "limiter.check() is not supported: every request is decided before its view; "
            f"flask_redis_throttle.check() tells whether it would pass without counting it ({SEE})"
        )

    def reset(self) -> None:
        """Delete every counter of the current app: :meth:`RateLimit.reset()
        <flask_redis_throttle.RateLimit.reset>` without an identity, which
        leaves other apps' key prefixes and the refusal log alone."""
        self.extension.reset()
