"""Flask-Limiter's ``Limiter``, translated onto :class:`~flask_redis_throttle.RateLimit`.

Nothing here decides a request. ``Limiter.init_app`` writes the
extension's own ``RATELIMIT_*`` settings from Flask-Limiter's arguments and
settings, then sets up a :class:`~flask_redis_throttle.RateLimit`;
``Limiter.limit`` and ``Limiter.exempt`` put the extension's own
:func:`~flask_redis_throttle.limit` and :func:`~flask_redis_throttle.exempt`
on the view or blueprint. Flask-Limiter's functions take no argument and
read :data:`flask.request`; the extension's take the request: each is
wrapped once, when it is given, keeping its module and name (key functions
count under that name). What has no counterpart is refused with a clear
error when it is given, never ignored; see :doc:`/flask-limiter`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

from flask import Blueprint, Flask, Request, Response

from ...current import CurrentLimit, current_limit
from ...decorators import exempt as native_exempt
from ...decorators import limit as native_limit
from ...errors import ConfigurationError, InvalidLimit
from ...extension import RateLimit
from ...signals import RefusalEvent
from .constants import ConfigVars, ExemptionScope, HeaderNames
from .util import get_remote_address

__all__ = ["ApplicationLimit", "Limit", "Limiter", "MetaLimit", "RequestLimit", "RouteLimit"]

Target = TypeVar("Target", bound="Callable[..., Any] | Blueprint")

#: Flask-Limiter's strategies, by the name of ours that does their job.
STRATEGIES = {
    "fixed-window": "fixed-window",
    "moving-window": "sliding-log",
    "sliding-window-counter": "sliding-window",
}

#: Flask-Limiter's storage URL schemes, by ours; the rest are kept as they are.
SCHEMES = {"redis+unix": "unix", "rediss+cluster": "redis+cluster"}

#: The flags an exemption must have here: it always drops both.
EXEMPTION = ExemptionScope.APPLICATION | ExemptionScope.DEFAULT

#: Where the errors send the reader.
SEE = "see 'Coming from Flask-Limiter' in the docs"

#: Flask-Limiter's settings that are not the extension's own: read by
#: :meth:`Limiter.init_app`, and hidden from the extension's check of
#: unknown keys while it sets up, since they have been read.
THEIR_SETTINGS = frozenset(
    value
    for name, value in vars(ConfigVars).items()
    if name.isupper()
    and value
    not in {
        "RATELIMIT_ENABLED",
        "RATELIMIT_KEY_PREFIX",
        "RATELIMIT_APPLICATION",
        "RATELIMIT_DEFAULT",
        "RATELIMIT_STRATEGY",
        "RATELIMIT_STORAGE_OPTIONS",
        "RATELIMIT_HEADERS_ENABLED",
    }
)


def of_request(function: Callable[[], Any]) -> Callable[[Request], Any]:
    """Flask-Limiter's function of nothing as the extension's function of
    the request, under the same module and name."""

    @functools.wraps(function)
    def called(request: Request) -> Any:
        return function()

    return called


def identities(key_func: Callable[[], str] | None) -> list[Any] | None:
    """Whom a Flask-Limiter key function counts: the built-in ``"ip"`` for
    :func:`~.util.get_remote_address`, else the function itself."""
    if key_func is None:
        return None
    if not callable(key_func):
        raise InvalidLimit(f"key_func {key_func!r} must be a function of no arguments", spec=key_func)
    if key_func is get_remote_address:
        return ["ip"]
    return [of_request(key_func)]


def unsupported(where: str, value: object, why: str) -> ConfigurationError:
    """The error for an argument or setting the extension has no counterpart for."""
    return ConfigurationError(where, value, f"{why} ({SEE})")


@dataclasses.dataclass(eq=False)
class Limit:
    """Flask-Limiter's ``Limit``: a default limit, as an item of ``default_limits``.

    Here a default limit is one setting, ``RATELIMIT_DEFAULT``: the items'
    limit strings are joined, and an item may not have options of its own;
    one that does is refused at ``init_app``.
    """

    limit_provider: Callable[[], str] | str
    key_function: Callable[[], str] | None = None
    scope: str | Callable[[str], str] | None = None
    cost: Callable[[], int] | int | None = None
    shared: bool = False
    methods: Sequence[str] | None = None
    per_method: bool = False
    error_message: str | Callable[[], str] | None = None
    meta_limits: Iterable[Callable[[], str] | str | MetaLimit] | None = None
    exempt_when: Callable[[], bool] | None = None
    deduct_when: Callable[[Response], bool] | None = None
    on_breach: Callable[[RequestLimit], Response | None] | None = None

    def options(self) -> dict[str, Any]:
        """The extension's options for this limit: :func:`~flask_redis_throttle.limit`'s keyword arguments.

        :raises InvalidLimit: for an option that has no counterpart.
        """
        if self.meta_limits:
            raise InvalidLimit(
                f"meta_limits {self.meta_limits!r}: meta limits are not supported; "
                f"use penalty= for an escalating refusal ({SEE})",
                spec=self.meta_limits,
            )
        if callable(self.scope):
            raise InvalidLimit(
                f"scope {self.scope!r}: a scope per request is not supported; use a key_func ({SEE})",
                spec=self.scope,
            )
        options: dict[str, Any] = {}
        if self.shared:
            options["scope"] = self.scope
        if self.key_function is not None:
            options["identities"] = identities(self.key_function)
        if self.methods is not None:
            options["methods"] = list(self.methods)
        if self.per_method:
            options["per_method"] = True
        if self.cost is not None:
            options["cost"] = of_request(self.cost) if callable(self.cost) else self.cost
        if self.exempt_when is not None:
            options["exempt_when"] = of_request(self.exempt_when)
        if self.deduct_when is not None:
            options["deduct_when"] = self.deduct_when  # a function of the response in both
        hook = breach_hook(self.on_breach, self.error_message, self.shared)
        if hook is not None:
            options["on_breach"] = hook
        return options

    def spec(self) -> str | Callable[[Request], str | None]:
        """The limit string, or the dynamic limit: the function of the request."""
        provider = self.limit_provider
        if not callable(provider):
            return provider
        return dynamic([provider])


@dataclasses.dataclass(eq=False)
class ApplicationLimit(Limit):
    """Flask-Limiter's ``ApplicationLimit``: an item of ``application_limits``."""


@dataclasses.dataclass(eq=False)
class MetaLimit(Limit):
    """Flask-Limiter's ``MetaLimit``. Meta limits are refused here: use a
    limit's ``penalty=`` (see :ref:`penalties`)."""


class RouteLimit(Limit):
    """What :meth:`Limiter.limit` returns: a decorator for a view or a blueprint."""

    def __init__(
        self,
        limit_value: str | Callable[[], str],
        override_defaults: bool | None = True,
        limiter: Limiter | None = None,
        **fields: Any,
    ) -> None:
        # ``limiter`` is Flask-Limiter's binding; the extension's limits need none.
        super().__init__(limit_value, **fields)
        # Made now, so that a malformed limit or option fails where it is written.
        self.native = native_limit(self.spec(), override_defaults=override_defaults, **self.options())

    def __call__(self, target: Target) -> Target:
        return self.native(target)

    def __enter__(self) -> None:
        raise NotImplementedError(
            "limiter.limit(...) as a context manager is not supported: limit the view, or decide "
            f"outside a request with flask_redis_throttle.core.throttle.Throttle.hit ({SEE})"
        )

    def __exit__(self, *exc: object) -> None:
        return None


def dynamic(
    items: Sequence[str | Callable[[], str]], exempt_when: Callable[[], bool] | None = None
) -> Callable[[Request], str | None]:
    """One dynamic limit of several Flask-Limiter limit values: their limit
    strings joined, or None (no limit) when ``exempt_when`` says so or none
    returns one. Named after the first function, for the extension's logs."""

    def limits(request: Request) -> str | None:
        if exempt_when is not None and exempt_when():
            return None
        texts = [item() if callable(item) else item for item in items]
        return ";".join(text for text in texts if text) or None

    named = next((item for item in items if callable(item)), exempt_when)
    if named is not None:
        functools.update_wrapper(limits, named, updated=())
    return limits


class RequestLimit:
    """Flask-Limiter's ``RequestLimit``: a limit as it stands for the
    current request, from the extension's
    :class:`~flask_redis_throttle.CurrentLimit` or refusal.

    :param limit: the deciding :class:`~flask_redis_throttle.Layer`
        (``limit.quota``, ``limit.window``; ``str(limit)`` as ``"10 per 1 minute"``).
    :param key: whose counter, such as ``"ip:127.0.0.1"``.
    :param breached: whether it had no room for the request.
    :param shared: whether it is a shared limit (its scope is not the endpoint's).
    """

    def __init__(
        self, limit: Any, key: str, breached: bool, shared: bool, remaining: int = 0, reset_at: float = 0
    ) -> None:
        self.limit = limit
        self.key = key
        self.breached = breached
        self.shared = shared
        self.remaining = remaining
        self.reset_at = int(reset_at)

    @classmethod
    def current(cls, found: CurrentLimit, endpoint: str | None) -> RequestLimit:
        return cls(
            found.layer,
            str(found.identity),
            found.breached,
            found.scope != endpoint,
            found.remaining,
            found.reset_at,
        )


def breach_hook(
    on_breach: Callable[[RequestLimit], Response | None] | None,
    error_message: str | Callable[[], str] | None,
    shared: bool,
) -> Callable[[RefusalEvent], Response | None] | None:
    """The extension's ``on_breach`` for Flask-Limiter's ``on_breach``
    (which takes a :class:`RequestLimit`) and ``error_message`` (the 429's
    body): a response either returns is sent instead of the 429."""
    if on_breach is None and error_message is None:
        return None
    if on_breach is not None and not callable(on_breach):
        raise InvalidLimit(f"on_breach {on_breach!r} must be a function", spec=on_breach)

    def hook(event: RefusalEvent) -> Response | None:
        if on_breach is not None:
            limit = RequestLimit(event.layer, str(event.identity), True, shared or event.scope != event.endpoint)
            response = on_breach(limit)
            if isinstance(response, Response):
                return response
        if error_message is None:
            return None
        message = error_message() if callable(error_message) else error_message
        return Response(message, 429, {"Retry-After": str(event.retry_after or 1)})

    if on_breach is not None:
        functools.update_wrapper(hook, on_breach, updated=())
    return hook


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
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set up rate limiting on ``app``: the extension's settings from
        this limiter's arguments and Flask-Limiter's settings, then
        :meth:`RateLimit.init_app <flask_redis_throttle.RateLimit.init_app>`.

        :raises ConfigurationError: for an argument or setting that has no
            counterpart here, or a bad value.
        """
        config = app.config
        self.enabled = config.setdefault(ConfigVars.ENABLED, self.enabled)
        ours = settings(lambda key: self._given(config, key), self.header_name_mapping, self.auto_check)
        read = {key: config.pop(key) for key in THEIR_SETTINGS & config.keys()}
        config.update(ours)
        try:
            self.extension.init_app(app)
        finally:
            config.update(read)
        app.extensions.setdefault("limiter", set()).add(self)

    def _given(self, config: Mapping[str, Any], key: str) -> Any:
        value = self.arguments.get(key)
        return config.get(key) if value is None else value

    def limit(
        self,
        limit_value: str | Callable[[], str],
        *,
        key_func: Callable[[], str] | None = None,
        per_method: bool = False,
        methods: list[str] | None = None,
        error_message: str | Callable[[], str] | None = None,
        exempt_when: Callable[[], bool] | None = None,
        override_defaults: bool = True,
        deduct_when: Callable[[Response], bool] | None = None,
        on_breach: Callable[[RequestLimit], Response | None] | None = None,
        cost: int | Callable[[], int] = 1,
        scope: str | Callable[[str], str] | None = None,
        meta_limits: Sequence[str | Callable[[], str] | MetaLimit] | None = None,
    ) -> RouteLimit:
        """Limit a view or a blueprint: :func:`flask_redis_throttle.limit`.

        A ``scope`` here only names the limit, as in Flask-Limiter: its
        counters are still the endpoint's. Use :meth:`shared_limit` to share them.
        """
        return RouteLimit(
            limit_value,
            override_defaults,
            key_function=key_func,
            per_method=per_method,
            methods=methods,
            error_message=error_message,
            exempt_when=exempt_when,
            deduct_when=deduct_when,
            on_breach=on_breach,
            cost=cost,
            scope=scope,
            meta_limits=meta_limits,
        )

    def shared_limit(
        self,
        limit_value: str | Callable[[], str],
        scope: str | Callable[[str], str],
        *,
        key_func: Callable[[], str] | None = None,
        per_method: bool = False,
        methods: list[str] | None = None,
        error_message: str | Callable[[], str] | None = None,
        exempt_when: Callable[[], bool] | None = None,
        override_defaults: bool = True,
        deduct_when: Callable[[Response], bool] | None = None,
        on_breach: Callable[[RequestLimit], Response | None] | None = None,
        cost: int | Callable[[], int] = 1,
        meta_limits: Sequence[str | Callable[[], str] | MetaLimit] | None = None,
    ) -> RouteLimit:
        """A limit whose counters every view given the same ``scope`` shares."""
        return RouteLimit(
            limit_value,
            override_defaults,
            key_function=key_func,
            per_method=per_method,
            methods=methods,
            error_message=error_message,
            exempt_when=exempt_when,
            deduct_when=deduct_when,
            on_breach=on_breach,
            cost=cost,
            scope=scope,
            shared=True,
            meta_limits=meta_limits,
        )

    def exempt(
        self,
        obj: Target | None = None,
        *,
        flags: ExemptionScope = ExemptionScope.APPLICATION | ExemptionScope.DEFAULT | ExemptionScope.META,
    ) -> Any:
        """Exempt a view or a blueprint: :func:`flask_redis_throttle.exempt`,
        which drops the default and application limits and those of
        enclosing blueprints, for nested blueprints too.

        :raises ValueError: if ``flags`` lack ``APPLICATION`` or ``DEFAULT``:
            an exemption that keeps either is not supported.
        """
        if EXEMPTION & flags != EXEMPTION:
            raise ValueError(
                f"exempt(flags={flags!r}): an exemption here always drops the default and application limits; "
                f"flags without ExemptionScope.APPLICATION and ExemptionScope.DEFAULT are not supported ({SEE})"
            )
        if obj is None:
            return native_exempt
        return native_exempt(obj)

    def request_filter(self, fn: Callable[[], bool]) -> Callable[[], bool]:
        """Leave the requests for which ``fn()`` is True unlimited."""
        self.extension.request_filter(of_request(fn))
        return fn

    @property
    def current_limit(self) -> RequestLimit | None:
        """The deciding limit of the current request: :func:`flask_redis_throttle.current_limit`."""
        from flask import request

        found = current_limit()
        return None if found is None else RequestLimit.current(found, request.endpoint)

    @property
    def current_limits(self) -> list[RequestLimit]:
        """Refused: the extension keeps the deciding limit of a request only (:attr:`current_limit`)."""
        raise NotImplementedError(
            "limiter.current_limits is not supported: limiter.current_limit is the deciding limit, "
            f"and the RateLimit-Policy header lists every layer ({SEE})"
        )

    def check(self) -> None:
        """Refused: the extension decides every request before its view; see ``auto_check``."""
        raise NotImplementedError(
            "limiter.check() is not supported: every request is decided before its view; "
            f"flask_redis_throttle.check() tells whether it would pass without counting it ({SEE})"
        )

    def reset(self) -> None:
        """Refused: the storage may be shared; reset one identity with
        :meth:`RateLimit.reset <flask_redis_throttle.RateLimit.reset>`."""
        raise NotImplementedError(
            "limiter.reset() is not supported: it would clear a storage other apps may share; "
            f"reset one identity with limiter.extension.reset('ip:...') ({SEE})"
        )


def settings(
    given: Callable[[str], Any], header_name_mapping: Mapping[HeaderNames, str], auto_check: bool
) -> MutableMapping[str, Any]:
    """The extension's settings for Flask-Limiter's: ``given(key)`` is the
    value of a Flask-Limiter setting (the argument, else the app's setting).

    :raises ConfigurationError: for one that has no counterpart here.
    """
    for key, why in REFUSED.items():
        if given(key):
            raise unsupported(key, given(key), why)
    renamed: dict[object, str] = {name: value for name, value in header_name_mapping.items() if name.value != value}
    for key in HEADER_SETTINGS:
        if given(key) is not None:
            renamed[key] = given(key)
    if renamed:
        raise unsupported("header_name_mapping", renamed, "no renaming: the X-RateLimit-* header names are fixed")
    if not auto_check:
        raise unsupported("Limiter(auto_check=False)", False, "True: every request is decided before its view")
    if given(ConfigVars.FAIL_ON_FIRST_BREACH) is False:
        raise unsupported(
            ConfigVars.FAIL_ON_FIRST_BREACH, False, "True: a refused request is counted in no limit, never in some"
        )
    ours: dict[str, Any] = {
        "RATELIMIT_IDENTITIES": identities(given(ConfigVars.KEY_FUNC)) or ["ip"],
        "RATELIMIT_HEADERS_ENABLED": bool(given(ConfigVars.HEADERS_ENABLED)),
        "RATELIMIT_HEADERS_LEGACY": True,
        "RATELIMIT_FAIL_OPEN": bool(given(ConfigVars.SWALLOW_ERRORS)),
        "RATELIMIT_FALLBACK": bool(given(ConfigVars.IN_MEMORY_FALLBACK_ENABLED)),
        "RATELIMIT_STORAGE_OPTIONS": dict(given(ConfigVars.STORAGE_OPTIONS) or {}),
        "RATELIMIT_DEFAULT": layered(ConfigVars.DEFAULT_LIMITS, given, ConfigVars.DEFAULT_LIMITS_EXEMPT_WHEN),
        "RATELIMIT_APPLICATION": layered(
            ConfigVars.APPLICATION_LIMITS, given, ConfigVars.APPLICATION_LIMITS_EXEMPT_WHEN
        ),
        # Flask-Limiter's limits replace the default unless told otherwise.
        "RATELIMIT_DEFAULT_MODE": "replace",
    }
    uri = given(ConfigVars.STORAGE_URI) or "memory://"
    ours["RATELIMIT_STORAGE_URL"] = storage_url(uri)
    if uri.startswith("rediss+cluster://"):
        ours["RATELIMIT_STORAGE_OPTIONS"].setdefault("ssl", True)
    strategy = given(ConfigVars.STRATEGY) or "fixed-window"
    if strategy not in STRATEGIES:
        raise ConfigurationError(ConfigVars.STRATEGY, strategy, f"one of {', '.join(STRATEGIES)}")
    ours["RATELIMIT_STRATEGY"] = STRATEGIES[strategy]
    if given(ConfigVars.KEY_PREFIX):
        ours["RATELIMIT_KEY_PREFIX"] = given(ConfigVars.KEY_PREFIX)
    retry_after = given(ConfigVars.HEADER_RETRY_AFTER_VALUE)
    if retry_after is not None:
        if retry_after not in ("http-date", "delta-seconds"):
            raise ConfigurationError(ConfigVars.HEADER_RETRY_AFTER_VALUE, retry_after, "'http-date' or 'delta-seconds'")
        ours["RATELIMIT_RETRY_AFTER"] = "http-date" if retry_after == "http-date" else "seconds"
    on_breach = given(ConfigVars.ON_BREACH)
    ours["RATELIMIT_ON_BREACH"] = breach_hook(on_breach, None, False)
    return ours


#: Flask-Limiter's settings that have no counterpart here yet, with why.
REFUSED = {
    ConfigVars.DEFAULT_LIMITS_PER_METHOD: "not supported for the default limits: put per_method=True on the views",
    ConfigVars.DEFAULT_LIMITS_DEDUCT_WHEN: "not supported for the default limits: put deduct_when= on the views",
    ConfigVars.DEFAULT_LIMITS_COST: "not supported for the default limits: put cost= on the views",
    ConfigVars.APPLICATION_LIMITS_PER_METHOD: "not supported for the application limits",
    ConfigVars.APPLICATION_LIMITS_DEDUCT_WHEN: "not supported for the application limits",
    ConfigVars.APPLICATION_LIMITS_COST: "not supported for the application limits",
    ConfigVars.META_LIMITS: "no meta limits: use a limit's penalty= for an escalating refusal",
    ConfigVars.ON_META_BREACH: "no meta limits: use a limit's penalty= and on_breach=",
    ConfigVars.REQUEST_IDENTIFIER: "none: counters are named after the endpoint, or a shared limit's scope",
    ConfigVars.IN_MEMORY_FALLBACK: (
        "no limits of its own: in_memory_fallback_enabled=True decides the app's own limits in process"
    ),
}

#: Flask-Limiter's settings that rename a header.
HEADER_SETTINGS = (
    ConfigVars.HEADER_LIMIT,
    ConfigVars.HEADER_REMAINING,
    ConfigVars.HEADER_RESET,
    ConfigVars.HEADER_RETRY_AFTER,
)


def layered(key: str, given: Callable[[str], Any], exempt_key: str) -> Any:
    """``RATELIMIT_DEFAULT`` or ``RATELIMIT_APPLICATION`` for Flask-Limiter's
    list of default or application limits: their limit strings joined, or
    one dynamic limit when any is a function or ``exempt_when`` is given."""
    value = given(key)
    if value is None:
        return None
    items = [value] if isinstance(value, str) or callable(value) else list(value)
    providers: list[str | Callable[[], str]] = []
    for item in items:
        if isinstance(item, Limit):
            if any(getattr(item, field.name) != field.default for field in dataclasses.fields(Limit)[1:]):
                raise unsupported(key, item, "limit strings, or Limit(...) without options of its own")
            item = item.limit_provider
        if not (isinstance(item, str) or callable(item)):
            raise ConfigurationError(key, value, "a list of limit strings or functions that return one")
        providers.append(item)
    exempt_when = given(exempt_key)
    if exempt_when is None and all(isinstance(item, str) for item in providers):
        return ";".join(str(item) for item in providers) or None
    return dynamic(providers, exempt_when)


def storage_url(uri: str) -> str:
    """Flask-Limiter's (the ``limits`` library's) storage URL as the extension's."""
    if not isinstance(uri, str):
        raise ConfigurationError(ConfigVars.STORAGE_URI, uri, "a storage URL string")
    scheme, sep, rest = uri.partition("://")
    if scheme.startswith("async+") or scheme.split("+")[0] in ("memcached", "mongodb", "etcd", "valkey"):
        raise unsupported(ConfigVars.STORAGE_URI, uri, "a Redis URL or memory://: the only storages here")
    return f"{SCHEMES.get(scheme, scheme)}{sep}{rest}"
