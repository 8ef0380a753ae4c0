"""Flask-Limiter's limit objects (``Limit``, ``RouteLimit``, ``RequestLimit``...)
as the extension's: each Flask-Limiter limit becomes the keyword arguments
of :func:`~flask_redis_throttle.limit`, and its functions of nothing
functions of the request (or of the refusal event), once, when it is given.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from flask import Blueprint, Request, Response, current_app, g, has_request_context, request
from flask.views import http_method_funcs

from ..._plan import qualified_name
from ...current import CurrentLimit
from ...decorators import EXEMPT_ATTRIBUTE, EXTENSION_KEY, LIMITS_ATTRIBUTE, Exemption, LimitDecorator
from ...decorators import limit as native_limit
from ...errors import InvalidLimit
from ...signals import RefusalEvent
from .util import get_remote_address

__all__ = [
    "SEE",
    "ApplicationLimit",
    "Limit",
    "MetaLimit",
    "RequestLimit",
    "RouteLimit",
    "breach_hook",
    "dynamic",
    "exempt_view",
    "exempted",
    "identities",
    "of_request",
]

Target = TypeVar("Target", bound="Callable[..., Any] | Blueprint")

#: Where the errors send the reader.
SEE = "see 'Coming from Flask-Limiter' in the docs"


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


@dataclasses.dataclass(eq=False)
class Limit:
    """Flask-Limiter's ``Limit``: a default limit, as an item of ``default_limits``.

    Each becomes a limit of ``RATELIMIT_DEFAULT``, with its options; the
    plain limit strings and functions of ``default_limits`` are one more.
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

    def options(self, scope: str | None = None) -> dict[str, Any]:
        """The extension's options for this limit: :func:`~flask_redis_throttle.limit`'s keyword arguments.

        :param scope: the scope it counts under unless it is shared or has a
            scope function; None for the endpoint.
        :raises InvalidLimit: for an option that has no counterpart.
        """
        options: dict[str, Any] = {}
        if self.meta_limits:
            items = [self.meta_limits] if isinstance(self.meta_limits, str) else list(self.meta_limits)
            if not all(isinstance(item, str) for item in items):
                raise InvalidLimit(
                    f"meta_limits {self.meta_limits!r}: a limit's meta limits are limit strings here; "
                    f"functions and MetaLimit(...) only in the Limiter's meta_limits ({SEE})",
                    spec=self.meta_limits,
                )
            options["meta"] = ";".join(map(str, items))
        if callable(self.scope):
            options["scope"] = scope_of(self.scope, self.shared)
        elif self.shared:
            options["scope"] = self.scope
        elif scope is not None:
            options["scope"] = scope
        provider = self.spec()
        if isinstance(provider, Dynamic):
            options["scope"] = provider.apart(options.get("scope"))
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
        if self.error_message is not None:
            message = self.error_message
            options["error_message"] = of_request(message) if callable(message) else message
        hook = breach_hook(self.on_breach, self.shared)
        if hook is not None:
            options["on_breach"] = hook
        return options

    def spec(self) -> str | Dynamic:
        """The limit string, or the dynamic limit: the function of the
        request, made once, since its scope reads what it returned."""
        provider = self.limit_provider
        if not callable(provider):
            return provider
        made = self.__dict__.get("_dynamic")
        if made is None:
            made = self.__dict__["_dynamic"] = dynamic([provider])
        return made


@dataclasses.dataclass(eq=False)
class ApplicationLimit(Limit):
    """Flask-Limiter's ``ApplicationLimit``: an item of ``application_limits``."""


@dataclasses.dataclass(eq=False)
class MetaLimit(Limit):
    """Flask-Limiter's ``MetaLimit``: an item of the ``Limiter``'s
    ``meta_limits``, one of :data:`RATELIMIT_META`."""


class RouteLimit(Limit):
    """What :meth:`Limiter.limit` returns: a decorator for a view or a blueprint."""

    def __init__(
        self,
        limit_value: str | Callable[[], str],
        override_defaults: bool | None = True,
        limiter: object = None,
        **fields: Any,
    ) -> None:
        super().__init__(limit_value, **fields)
        #: The :class:`Limiter` that made it, whose apps read their endpoints'
        #: limits again when it is put on a view; None for none.
        self.limiter = limiter
        # Made now, so that a malformed limit or option fails where it is written.
        self.native = native_limit(self.spec(), override_defaults=override_defaults, **self.options())

    def __call__(self, target: Target) -> Target:
        """Limit a blueprint or a view, as the extension's :func:`limit`
        does; and, as in Flask-Limiter, a function that is not a view, when
        it is called in a request: its counters are named after it, unless
        the limit is shared."""
        if getattr(target, EXEMPT_VIEW, False):
            return target  # as in Flask-Limiter, an exempt view has no limits, not even its own
        self.native(target)
        replace_inherited(target)
        forget = getattr(self.limiter, "forget_plans", None)
        if forget is not None:
            forget()
        if isinstance(target, Blueprint):
            return target
        block = native_limit(self.spec(), **self.options(qualified_name(target)))
        function: Callable[..., Any] = target

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def limited_async(*args: Any, **kwargs: Any) -> Any:
                self.decide_when_called(limited_async, block)
                return await function(*args, **kwargs)

            return limited_async  # type: ignore[return-value]

        @functools.wraps(function)
        def limited(*args: Any, **kwargs: Any) -> Any:
            self.decide_when_called(limited, block)
            return function(*args, **kwargs)

        return limited  # type: ignore[return-value]

    def decide_when_called(self, limited: Callable[..., Any], block: LimitDecorator) -> None:
        """Decide the limit when ``limited`` is called in a request, unless
        the extension decided it before the view: ``block`` for a function
        that is not the view; and the view's own limit when its dynamic
        function raised before the view (it may read what the view's
        decorators set, as in Flask-Limiter)."""
        if not has_request_context():
            return
        if not is_view_of(limited, request.endpoint):
            block.__enter__()
            if self.native.spec.override_defaults is not False:
                hint_override(request.endpoint)
        elif callable(self.limit_provider) and self.spec() in g.get(UNDECIDED, ()):  # only a dynamic one can be
            self.native.__enter__()

    def __enter__(self) -> None:
        """Decide the limit for the current request now: the extension's
        ``with limit(...)``. A scope here gives the block counters of its own
        within the endpoint, as in Flask-Limiter."""
        block = self.native
        if self.scope is not None and not self.shared:
            block = native_limit(self.spec(), **self.options(f"{request.endpoint}:{self.scope}"))
        block.__enter__()

    def __exit__(self, *exc: object) -> None:
        return None


#: The attribute ``limiter.exempt`` marks a view with: Flask-Limiter's
#: exemption of a view drops the view's own limits too, which
#: :func:`flask_redis_throttle.exempt` keeps.
EXEMPT_VIEW = "__flask_limiter_exempt__"


def exempt_view(view: Callable[..., Any]) -> None:
    """Drop the limits put on ``view``, and those put on it later."""
    setattr(view, LIMITS_ATTRIBUTE, ())
    setattr(view, EXEMPT_VIEW, True)


#: The attribute that keeps the exemption ``limiter.exempt`` put on a view
#: or blueprint, which :func:`replace_inherited` adds to.
EXEMPTION = "__flask_limiter_exemption__"


def exempted(target: Callable[..., Any] | Blueprint) -> None:
    """Keep the exemption :func:`flask_redis_throttle.exempt` just put on
    ``target``, for :func:`replace_inherited`; and, as in Flask-Limiter,
    drop an exempt view's own limits."""
    setattr(target, EXEMPTION, getattr(target, EXEMPT_ATTRIBUTE))
    if isinstance(target, Blueprint):
        replace_inherited(target)
    else:
        exempt_view(target)


#: The attribute that holds the exemption :func:`replace_inherited` put on a
#: view or blueprint, to tell it from one the native ``exempt`` put there.
DERIVED = "__flask_limiter_derived__"

#: The attribute that marks a view in whose requests a function with a
#: limit that overrides the default has run.
OVERRIDDEN = "__flask_limiter_overridden__"


def hint_override(endpoint: str | None) -> None:
    """The view of ``endpoint`` loses the default limits from its next
    request on: a function with a limit that overrides them ran in one of
    its requests. Flask-Limiter learns it the same way, at the first call."""
    view = current_app.view_functions.get(endpoint) if endpoint is not None else None
    if view is None or getattr(view, OVERRIDDEN, False):
        return
    setattr(view, OVERRIDDEN, True)
    replace_inherited(view)
    state = current_app.extensions.get(EXTENSION_KEY)
    if state is not None:
        state.forget_plans()


def replace_inherited(target: Callable[..., Any] | Blueprint) -> None:
    """Flask-Limiter's ``override_defaults`` for the limits of enclosing
    blueprints, which the extension adds up: a view any of whose limits
    overrides the default, and a blueprint all of whose limits do, lose the
    limits of the blueprints they are in. The extension's exemption of
    ``target`` drops them (``"blueprints"``), beside what ``limiter.exempt``
    dropped; for a blueprint, for its own views only, unless that exemption
    covers nested blueprints too. A view marked by :func:`hint_override`
    loses the default limits too. A class-based view's method is left
    alone: its class is the view, which ``limiter.exempt`` exempts."""
    if is_method(target):
        return
    current = getattr(target, EXEMPT_ATTRIBUTE, None)
    if current is not None and current is not getattr(target, DERIVED, None) and not hasattr(target, EXEMPTION):
        setattr(target, EXEMPTION, current)  # the native exempt's, put on it directly: kept
    specs = getattr(target, LIMITS_ATTRIBUTE, ())
    overrides = [spec.override_defaults is not False for spec in specs]
    replaces = all(overrides) if isinstance(target, Blueprint) else any(overrides)
    explicit: Exemption | None = getattr(target, EXEMPTION, None)
    drops = set() if explicit is None else set(explicit.drops)
    if specs and replaces:
        drops.add("blueprints")
    if getattr(target, OVERRIDDEN, False):
        drops.add("default")
    nested = explicit is not None and explicit.nested
    if drops or current is not None:
        derived = Exemption(frozenset(drops), nested) if drops else None
        setattr(target, EXEMPT_ATTRIBUTE, derived)
        setattr(target, DERIVED, derived)


def is_method(target: object) -> bool:
    """Whether ``target`` is a function defined in a class (its qualified
    name is dotted after its last ``<locals>``), such as a ``MethodView``'s ``get``."""
    qualname = getattr(target, "__qualname__", "")
    return isinstance(qualname, str) and "." in qualname.rpartition("<locals>.")[2]


def is_view_of(function: Callable[..., Any], endpoint: str | None) -> bool:
    """Whether ``function`` is the view of ``endpoint`` (or a function the
    view wraps, or a method of its class that handles requests), whose
    limits the extension decided before the view."""
    view = current_app.view_functions.get(endpoint) if endpoint is not None else None
    while view is not None:
        if view is function:
            return True
        view_class = getattr(view, "view_class", None)
        if view_class is not None and any(
            getattr(view_class, name, None) is function for name in ("dispatch_request", *http_method_funcs)
        ):
            return True
        view = getattr(view, "__wrapped__", None)
    return False


def scope_of(scope: Callable[[str], str], shared: bool) -> Callable[[Request], str]:
    """The extension's scope function for Flask-Limiter's, which takes the
    endpoint: its value, for a shared limit; else within the endpoint, as
    Flask-Limiter keeps a limit that is not shared apart for each endpoint."""

    @functools.wraps(scope)
    def scoped(request: Request) -> str:
        value = scope(request.endpoint or "")
        return str(value) if shared else f"{request.endpoint}:{value}"

    return scoped


#: The attribute of :data:`flask.g` that holds the request's
#: :class:`Dynamic` limits whose function raised before the view.
UNDECIDED = "_flask_limiter_undecided"

#: The extension's logger.
logger = logging.getLogger("flask_redis_throttle")


def dynamic(items: Sequence[str | Callable[[], str]]) -> Dynamic:
    """One dynamic limit of several Flask-Limiter limit values: their limit
    strings joined, or None (no limit) when none returns one."""
    return Dynamic(items)


class Dynamic:
    """A dynamic limit of Flask-Limiter limit values: called with the
    request, their limit strings joined, or None (no limit) when none
    returns one. Named after the first function, for the extension's logs.

    Flask-Limiter keeps a counter for each limit string a function returns;
    the extension shares one for every string of a limit, so :meth:`apart`
    gives the limit a scope function that names the string.
    """

    def __init__(self, items: Sequence[str | Callable[[], str]]) -> None:
        self.items = list(items)
        #: The last request, what it was given, and the error a function
        #: raised instead (None if none did): its scope reads it rather than
        #: call the functions again, and ``flask limiter limits`` shows the
        #: error. One tuple, replaced whole, so that a thread reads a
        #: request's own value or calls the functions.
        self.last: tuple[object, str | None, Exception | None] = (None, None, None)
        named = next((item for item in items if callable(item)), None)
        if named is not None:
            functools.update_wrapper(self, named, updated=())

    def __call__(self, request: Request) -> str | None:
        raised = None
        try:
            texts = [item() if callable(item) else item for item in self.items]
        except Exception as error:
            raised = error
            # As in Flask-Limiter: logged, and the limit left out; a function
            # that reads what the view's decorators set is called again when
            # the view is (see RouteLimit.__call__).
            logger.exception("the limit function %s raised; its limit is left out", qualified_name(self))
            if has_request_context():
                g.setdefault(UNDECIDED, set()).add(self)
            texts = []
        value = ";".join(text for text in texts if text) or None
        self.last = (request, value, raised)
        return value

    def apart(self, scope: str | Callable[[Request], str] | None) -> Callable[[Request], str]:
        """A scope function that counts each limit string under a scope of
        its own: ``scope`` (or the function's value, or the endpoint when
        None), ``:``, the string, as Flask-Limiter keeps a counter per
        limit string."""

        def apart(request: Request) -> str:
            asked, value, _ = self.last
            if asked is not request:
                value = self(request)
            base = scope(request) if callable(scope) else scope or request.endpoint
            return f"{base}:{value}"

        functools.update_wrapper(apart, self, updated=())
        # What ``flask limiter clear`` clears every string's counters beneath:
        # the scope, "" for the endpoint's, None when a function gives it.
        apart.beneath = "" if scope is None else scope if isinstance(scope, str) else None  # type: ignore[attr-defined]
        return apart


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
    on_breach: Callable[[RequestLimit], Response | None] | None, shared: bool
) -> Callable[[RefusalEvent], Response | None] | None:
    """The extension's ``on_breach`` for Flask-Limiter's, which takes a
    :class:`RequestLimit`: a response it returns is sent instead of the 429."""
    if on_breach is None:
        return None
    if not callable(on_breach):
        raise InvalidLimit(f"on_breach {on_breach!r} must be a function", spec=on_breach)

    def hook(event: RefusalEvent) -> Response | None:
        limit = RequestLimit(event.layer, str(event.identity), True, shared or event.scope != event.endpoint)
        response = on_breach(limit)
        return response if isinstance(response, Response) else None

    functools.update_wrapper(hook, on_breach, updated=())
    return hook
