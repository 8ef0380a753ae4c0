"""Flask-Limiter's limits as :func:`~flask_redis_throttle.limit`'s options (:doc:`/flask-limiter`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from flask import Blueprint, Request, Response, current_app, g, has_request_context, request
from flask.views import http_method_funcs

from ...core.engine.rates import MAX_LIMIT_LENGTH
from ...current import CurrentLimit, current_limit
from ...decorators import INHERITED, DynamicLimit, Exemption, LimitDecorator, exempt, exemption_of
from ...decorators import limit as native_limit
from ...errors import InvalidLimit
from ...extension import qualified_name, state_of
from ...signals import RefusalEvent
from .util import get_remote_address

logger = logging.getLogger("flask_redis_throttle")

Target = TypeVar("Target", bound="Callable[..., Any] | Blueprint")

SEE = "see 'Coming from Flask-Limiter' in the docs"
FUNCTION = "a function"


#: One layer: its quota, its multiple (maybe none) and its unit, as the ``limits`` library reads it.
LAYER = re.compile(r"\s*([0-9]+)\s*(?:/|per)\s*([0-9]*)\s*([a-z]+)\s*", re.IGNORECASE)
#: Each unit, and its plural, in seconds: a month is 30 days there, a year 360.
UNITS = {"second": 1, "minute": 60, "hour": 3_600, "day": 86_400, "month": 30 * 86_400, "year": 360 * 86_400}
UNITS.update({f"{name}s": seconds for name, seconds in list(UNITS.items())})
#: The units a window is written in here, longest first.
WRITTEN = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def translate(text: str) -> str:
    """``"5 per minute | 1/second"`` as ``"5 per 1 minute;1 per 1 second"``; a ValueError as ``limits`` words it."""
    if not isinstance(text, str) or len(text) > MAX_LIMIT_LENGTH or not text:
        return text
    quotas: dict[int, int] = {}
    for layer in re.split(r"[,;|]", text):
        found = LAYER.fullmatch(layer)
        unit = found and UNITS.get(found[3].lower())
        if found is None or unit is None:
            raise ValueError(f"couldn't parse rate limit string '{text}'")
        window = (int(found[2] or 0) or 1) * unit  # a multiple of 0 is 1 there
        quota = int(found[1])
        quotas[window] = min(quota, quotas.get(window, quota))
    return ";".join(f"{quota} per {written(window)}" for window, quota in quotas.items())


def written(window: int) -> str:
    """A window of whole seconds in its longest whole unit: ``"2 minute"``."""
    name, seconds = next((name, seconds) for name, seconds in WRITTEN if window % seconds == 0)
    return f"{window // seconds} {name}"


#: On :data:`flask.g`: an ``on_breach`` function's error, raised or logged with the response.
BREACH_ERROR = "_flask_limiter_breach_error"


def describe_refusal(request: Request) -> str:
    """The 429's description without an ``error_message``: the refusing layer, as Flask-Limiter words it."""
    found = current_limit()
    return "Too Many Requests" if found is None else str(found.layer)


def a_function(value: Any) -> Any:
    if not callable(value):
        raise TypeError(f"{value!r} is not a function")
    return value


def of_request(function: Callable[[], Any]) -> Callable[[Request], Any]:
    """A function of nothing as a function of the request, under the same name."""

    @functools.wraps(a_function(function))
    def called(request: Request) -> Any:
        return function()

    return called


def identities(key_func: Callable[[], str] | None) -> list[Any] | None:
    """``"ip"`` for ``get_remote_address``, else the function (its error a 500, or under swallow_errors no one)."""
    if key_func is None:
        return None
    if key_func is get_remote_address:
        return ["ip"]

    @functools.wraps(a_function(key_func))
    def called(request: Request) -> str | None:
        try:
            return key_func()
        except Exception:
            if not state_of().settings.fail_open:  # called by the extension: its app has one
                raise
            logger.exception("Failed to rate limit. Swallowing error")
            return None

    return [called]


def of_value(value: Any) -> Any:
    return of_request(value) if callable(value) else value


def meta_of(meta_limits: Any) -> str | None:
    items = [meta_limits] if isinstance(meta_limits, str) else list(meta_limits)
    if not all(isinstance(item, str) for item in items):
        raise TypeError(f"functions and MetaLimit(...) only in the Limiter's meta_limits ({SEE})")
    return translate(";".join(items)) or None


#: :class:`Limit`'s fields that are :func:`~flask_redis_throttle.limit`'s options: name there, how read, what taken.
OPTIONS: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    "key_function": ("identities", identities, FUNCTION),
    "methods": ("methods", lambda methods: [methods] if isinstance(methods, str) else list(methods), "HTTP methods"),
    "per_method": ("per_method", bool, "True or False"),
    "cost": ("cost", of_value, "a number, or a function that returns one"),
    "exempt_when": ("exempt_when", of_request, FUNCTION),
    "deduct_when": ("deduct_when", a_function, FUNCTION),  # a function of the response in both
    "meta_limits": ("meta", meta_of, "limit strings"),
}


@dataclasses.dataclass(eq=False)
class Limit:
    """Flask-Limiter's ``Limit``."""

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

    def options(self, scope: str | None = None, fallback: DynamicLimit | None = None) -> dict[str, Any]:
        """:func:`~flask_redis_throttle.limit`'s options: under ``scope`` unless shared or a function."""
        options: dict[str, Any] = {}
        for field, (name, read, takes) in OPTIONS.items():
            value = getattr(self, field)
            if value is not None:
                try:
                    options[name] = read(value)
                except (TypeError, ValueError) as error:
                    written = {"key_function": "key_func"}.get(field, field)  # as limit(...) takes it
                    raise InvalidLimit(f"{written} {value!r} must be {takes}: {error}", spec=value) from None
        if callable(self.scope):
            options["scope"] = scope_of(self.scope, self.shared)
        elif self.shared or scope is not None:
            options["scope"] = self.scope if self.shared else scope
        provider = self.spec(fallback) if callable(self.limit_provider) else None
        if isinstance(provider, Dynamic):
            options["scope"] = Apart(provider, options.get("scope"))
        options["error_message"] = describe_refusal if self.error_message is None else of_value(self.error_message)
        if self.on_breach is not None:
            options["on_breach"] = breach_hook(self.on_breach, self.shared)
        return options

    def spec(self, fallback: DynamicLimit | None = None) -> str | Dynamic:
        """Our limit string (or a ValueError), or the :class:`Dynamic` limit: one per ``fallback``, for Apart."""
        provider = self.limit_provider
        if not callable(provider):
            return translate(provider)
        made: dict[DynamicLimit | None, Dynamic] = self.__dict__.setdefault("_dynamic", {})
        return made.setdefault(fallback, Dynamic(provider, fallback))


class ApplicationLimit(Limit): ...


class MetaLimit(Limit): ...


class RouteLimit(Limit):
    """What :meth:`Limiter.limit` returns: a decorator for a view or a blueprint."""

    def __init__(
        self,
        limit_value: str | Callable[[], str],
        override_defaults: bool | None = True,
        limiter: Any = None,
        key_func: Callable[[], str] | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(limit_value, key_func or limiter.key_func, **fields)
        self.limiter = limiter
        self.unreadable: ValueError | None = None
        # What a dynamic limit that comes to nothing falls back to, on a view and on a blueprint.
        self.fallbacks = (default_limits, blueprint_default_limits) if override_defaults is not False else (None, None)
        self.override_defaults = override_defaults
        try:
            spec = self.spec(self.fallbacks[0])
        except ValueError as error:
            self.unreadable = error  # logged where it is put; the default limits apply there
            spec = ""
        # Made now, so that a malformed limit fails where it is written; an empty one is no limit, as in Flask-Limiter.
        self.native = self.decorator(self.fallbacks[0], override_defaults=override_defaults) if spec else None
        self.block = self.decorator() if callable(spec) else self.native  # for with limit(...): no fallback

    def decorator(self, fallback: DynamicLimit | None = None, scope: str | None = None, **extra: Any) -> LimitDecorator:
        return native_limit(self.spec(fallback), **self.options(scope, fallback), **extra)

    def __call__(self, target: Target) -> Target:
        """Limit a blueprint, a view, or a function called in a request; a malformed limit is only logged."""
        exemption = exemption_of(target)
        if exemption is not None and exemption.own_limits:
            return target  # as in Flask-Limiter, an exempt view has no limits, not even its own
        if self.native is None:
            unread(target, self.unreadable)
            return target
        native = self.native
        if isinstance(target, Blueprint) and callable(self.limit_provider):
            native = self.decorator(self.fallbacks[1], override_defaults=self.override_defaults)
        native(target)
        self.limiter.forget_plans()
        if isinstance(target, Blueprint):
            return target
        block = self.decorator(scope=qualified_name(target))
        function: Callable[..., Any] = target

        async def limited_async(*args: Any, **kwargs: Any) -> Any:
            self.decide_when_called(limited, block)
            return await function(*args, **kwargs)

        def limited_sync(*args: Any, **kwargs: Any) -> Any:
            self.decide_when_called(limited, block)
            return function(*args, **kwargs)

        limited = functools.wraps(function)(limited_async if inspect.iscoroutinefunction(function) else limited_sync)
        return limited  # type: ignore[return-value]

    def decide_when_called(self, limited: Callable[..., Any], block: LimitDecorator) -> None:
        """Decide ``block`` if ``limited`` is not the request's view; else its dynamic limit again if that raised."""
        if not has_request_context():
            return
        view = current_app.view_functions.get(request.endpoint or "")
        if not is_view_of(limited, view):
            block.__enter__()
            found = exemption_of(view) or Exemption(frozenset())
            if self.override_defaults is not False and view is not None and "default" not in found.drops:
                # As in Flask-Limiter, a limit that overrides the defaults drops them from the view's next request on.
                keep = [kind for kind in INHERITED if kind not in found.drops | {"default"}]
                exempt(keep=keep, nested=found.nested, own_limits=found.own_limits)(view)
                state_of().forget_plans()  # there is one: its block was just decided
        elif self.native is not None and g.get(UNDECIDED, set()) & set(self.__dict__.get("_dynamic", {}).values()):
            self.native.__enter__()  # only a dynamic limit can be undecided

    def __enter__(self) -> None:
        """``with limit(...)``: decide the limit now; a scope counts apart within the endpoint."""
        block = self.block
        if block is None:
            unread(request.endpoint, self.unreadable)
            return
        if self.scope is not None and not self.shared:
            block = self.decorator(scope=f"{request.endpoint}:{self.scope}")
        block.__enter__()

    def __exit__(self, *exc: object) -> None:
        return None


def is_view_of(function: Callable[..., Any], view: Callable[..., Any] | None) -> bool:
    """Whether ``function`` is ``view``, one it wraps, or a method of its class."""
    while view is not None:
        view_class = getattr(view, "view_class", None)
        methods = (getattr(view_class, name, None) for name in ("dispatch_request", *http_method_funcs))
        if view is function or any(method is function for method in methods):
            return True
        view = getattr(view, "__wrapped__", None)
    return False


def scope_of(scope: Callable[[str], str], shared: bool) -> Callable[[Request], str]:
    """Flask-Limiter's scope function of the endpoint: counted within it unless shared."""

    @functools.wraps(scope)
    def scoped(request: Request) -> str:
        value = scope(request.endpoint or "")
        return str(value) if shared else f"{request.endpoint}:{value}"

    return scoped


#: On :data:`flask.g`: the request's :class:`Dynamic` limits that raised.
UNDECIDED = "_flask_limiter_undecided"


class Dynamic:
    """A Flask-Limiter limit function: ``fallback``'s limit when it returns nothing, left out when it raises."""

    def __init__(self, function: Callable[[], str], fallback: DynamicLimit | None = None) -> None:
        self.function, self.fallback = function, fallback
        # The last request and its value, for its scope: replaced whole, so a thread reads its own or calls again.
        self.last: tuple[object, str | None] = (None, None)
        functools.update_wrapper(self, function, updated=())

    def __call__(self, request: Request) -> str | None:
        try:
            text = self.function()
        except Exception:
            logger.exception("the limit function %s raised; its limit is left out", qualified_name(self))
            if has_request_context():
                g.setdefault(UNDECIDED, set()).add(self)
            self.last = (request, None)
            return None
        try:
            value = translate(text) or None
        except ValueError as error:
            unread(request.endpoint, error)
            value = None
        if value is None and self.fallback is not None:
            value = self.fallback(request)
        self.last = (request, value)
        return value


@dataclasses.dataclass(eq=False)
class Apart:
    """A scope that counts each string of ``dynamic`` apart: ``scope`` (or the endpoint), ``:``, the string."""

    dynamic: Dynamic
    scope: str | Callable[[Request], str] | None

    def __post_init__(self) -> None:
        functools.update_wrapper(self, self.dynamic, updated=())

    def __call__(self, request: Request) -> str:
        asked, value = self.dynamic.last
        if asked is not request:
            value = self.dynamic(request)
        base = self.scope(request) if callable(self.scope) else self.scope or request.endpoint
        return f"{base}:{value}"


def default_limits(request: Request) -> str | None:
    """The default limits of ``request``, joined (a dynamic limit's fallback); None where exempt."""
    holders = [
        current_app.view_functions.get(request.endpoint or ""),
        *map(current_app.blueprints.get, request.blueprints),
    ]
    if any(found is not None and "default" in found.drops for found in map(exemption_of, holders)):
        return None
    texts = []
    for spec in state_of().settings.default:
        if spec.exempt_when is None or not spec.exempt_when(request):
            texts.append(spec.limit if isinstance(spec.limit, str) else spec.limit(request))
    return translate(";".join(text for text in texts if text)) or None


def blueprint_default_limits(request: Request) -> str | None:
    """:func:`default_limits`, for a blueprint's limit: none for a view with limits of its own."""
    plan = state_of().plan(request.endpoint, request.method)
    own = plan is not None and any(limit.source == "view" for limit in plan.limits)
    return None if own else default_limits(request)


def unread(target: object, error: ValueError | None) -> None:
    """Log that a limit of ``target`` was not read."""
    if error is not None:
        kind, name = ("function", qualified_name(target)) if callable(target) else ("endpoint", target)
        kind, name = ("blueprint", target.name) if isinstance(target, Blueprint) else (kind, name)
        logger.error("failed to load ratelimit for %s %s: %s", kind, name, error)


@dataclasses.dataclass(eq=False)
class RequestLimit:
    """Flask-Limiter's ``RequestLimit`` (:doc:`/flask-limiter`)."""

    limit: Any
    key: str
    breached: bool
    shared: bool
    remaining: int = 0
    reset_at: int = 0

    @classmethod
    def of(cls, found: CurrentLimit | RefusalEvent, endpoint: str | None) -> RequestLimit:
        """``found`` keyed as Flask-Limiter names its counter; shared unless its scope is ``endpoint`` or within it."""
        scope, layer = found.scope, found.layer
        key = f"LIMITER/{found.identity.value}/{scope}/{layer.quota}/{written(layer.window).replace(' ', '/')}"
        shared = scope != endpoint and not (endpoint is not None and scope.startswith(f"{endpoint}:"))
        if isinstance(found, RefusalEvent):  # its reset is the on_breach hook's to tell
            return cls(layer, key, True, shared)
        return cls(layer, key, found.breached, shared, found.remaining, int(found.reset_at))


def breach_hook(
    on_breach: Callable[[RequestLimit], Response | None] | None, shared: bool = False
) -> Callable[[RefusalEvent], Response | None] | None:
    """The extension's ``on_breach`` for Flask-Limiter's."""
    if on_breach is None:
        return None
    if not callable(on_breach):
        raise InvalidLimit(f"on_breach {on_breach!r} must be a function", spec=on_breach)

    def hook(event: RefusalEvent) -> Response | None:
        # When the refusing counter is full again; else when the request would pass.
        found, refusing = current_limit(), (event.scope, event.layer, event.identity)
        same = found is not None and (found.scope, found.layer, found.identity) == refusing
        reset_at = found.reset_at if found is not None and same else time.time() + (event.retry_after or 0)
        limit = RequestLimit.of(event, event.endpoint)
        limit.shared, limit.reset_at = shared or limit.shared, int(reset_at)
        try:
            response = on_breach(limit)
        except Exception as error:
            g.setdefault(BREACH_ERROR, error)
            return None
        return response if isinstance(response, Response) else None

    functools.update_wrapper(hook, on_breach, updated=())
    return hook
