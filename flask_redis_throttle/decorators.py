"""The :func:`limit` and :func:`exempt` decorators.

They only record the limit, or the exemption, on the view function or the
blueprint; the extension reads them when an endpoint is first requested. So
they need no extension instance in scope, work in either order with
``@app.route``, and leave ``async def`` views alone. Every option is checked
here, when the decorator is applied, so that a typo fails at import time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from flask import Blueprint, Flask, current_app

from ._request.spec import CostFunction, DynamicLimit, LimitOptions, LimitSpec, RefusalHook, make_spec

if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "EXEMPT_ATTRIBUTE",
    "EXTENSION_KEY",
    "INHERITED",
    "LIMITS_ATTRIBUTE",
    "CostFunction",
    "DynamicLimit",
    "Exemption",
    "LimitDecorator",
    "LimitOptions",
    "LimitSpec",
    "RefusalHook",
    "exempt",
    "exemption_of",
    "limit",
    "make_spec",
]

#: The key of the extension's state in ``app.extensions``, where a limit's
#: ``with`` block finds it.
EXTENSION_KEY = "ratelimit"


def state_of(app: Flask | None = None, *, required: bool = True) -> Any:
    """The extension's state on ``app``, or on the current app: its
    :class:`~flask_redis_throttle.extension.RateLimitState` (typed ``Any``
    here, below the module that defines it), or None where the extension
    is not set up and the state is not ``required``. Every lookup of the
    state goes through here, so that an app without it says so one way:
    a :class:`RuntimeError`.
    """
    state = (app or current_app).extensions.get(EXTENSION_KEY)
    if state is None and required:
        raise RuntimeError("rate limiting is not set up on this app (RateLimit(app) or init_app(app))")
    return state


#: The attribute of a view function or blueprint that holds its limits.
LIMITS_ATTRIBUTE = "__ratelimits__"
#: The attribute of a view function or blueprint that holds its :class:`Exemption`.
EXEMPT_ATTRIBUTE = "__ratelimit_exempt__"


#: What the decorators accept: a view function or a blueprint.
Target = TypeVar("Target", bound="Callable[..., Any] | Blueprint")


def limit(spec: str | DynamicLimit, **options: Unpack[LimitOptions]) -> LimitDecorator:
    """Limit a view, or every view of a blueprint. A request passes only if
    every layer of every identity has room.

    .. code-block:: python

        @app.get("/api/items")
        @limit("10/s;120/m;240/h")
        def items(): ...

        limit("1000/h")(api_blueprint)

    Several limits on one view all apply, and are still decided in one round
    trip (see :doc:`/limits` for the options that take more).

    :param spec: the layers, such as ``"10/s;120/m"`` (see :doc:`/grammar`),
        or a function that takes the request and returns such a string, or
        None for no limit, per request (a *dynamic* limit).
    :param scope: the name to count under. Views that give the same scope
        share counters. By default each endpoint counts on its own. It may
        also be a function of the request that returns the name, for a
        scope per request (see :ref:`scope functions <scope-functions>`).
    :param identities: whom to count, overriding ``RATELIMIT_IDENTITIES``:
        ``"ip"``, ``"user"``, ``"user-or-ip"`` or key functions.
    :param strategy: the algorithm, overriding ``RATELIMIT_STRATEGY``:
        ``"fixed-window"``, ``"sliding-window"``, ``"sliding-log"`` or
        ``"gcra"`` (see :doc:`/algorithms`).
    :param methods: only limit requests with these HTTP methods, such as
        ``["POST"]``; ``GET`` covers ``HEAD`` too. By default, every method.
    :param cost: how much quota a request takes: an integer, or a function
        that takes the request and returns one.
    :param deduct_when: a function of the response; when given, the request
        is refused before the view if it would not fit, but counted only if
        this returns True for the view's response.
    :param exempt_when: a function of the request; the limit does not apply
        to requests for which it returns True.
    :param shadow: log refusals, send the headers and the hooks, but let
        the request through (a dry run).
    :param on_breach: a function called with a
        :class:`~flask_redis_throttle.signals.RefusalEvent` when this limit refuses
        a request.
    :param penalty: refuse an identity that keeps hitting this limit for an
        escalating time, such as ``"1m;x2;max=1h"``: a minute after its
        first refusal, then two, four... up to an hour (see :ref:`penalties`).
    :param meta: a meta limit, such as ``"3/h"``: a limit on how often this
        limit refuses an identity; once full, the identity is refused until
        its window passes (see :ref:`meta-limits`).
    :param per_method: count each HTTP method on its own: ``GET`` and
        ``POST`` each get the whole quota (``HEAD`` counts with ``GET``).
        By default the methods it applies to share its counters.
    :param error_message: the description of the 429 when this limit
        refuses a request (the body's text, the JSON ``detail``, an error
        handler's ``error.description``), or a function of the request that
        returns it; by default the extension's, which names the layer and
        the wait (see :ref:`custom-429`).
    :param override_defaults: whether the views this limit is on lose
        ``RATELIMIT_DEFAULT`` (True) or keep it beside this limit (False).
        By default (None), ``RATELIMIT_DEFAULT_MODE`` decides. The default
        applies to a view only if none of its limits overrides it (see
        :ref:`default-limits`).
    :param unit: what the quota counts, sent as ``qu`` in
        ``RateLimit-Policy``: ``"requests"`` (the default, left unsaid), or
        ``"content-bytes"`` for a ``cost`` in bytes (see :ref:`quota-units`).
    :param delay: shaping: a request over the rate waits for its turn, up
        to this long, rather than get a 429. A duration such as ``"250ms"``
        or ``"1.5s"``, a number of seconds, or True for half a second; at
        most 10 s. It needs the ``"gcra"`` strategy, which it picks when
        none is given, and with which requests go one every ``window /
        quota``; or ``"sliding-log"``, which lets the whole quota go at
        once and a request over it wait until the entry that blocks it
        leaves the window (see :doc:`/shaping`).
    :param concurrent: also cap how many of an identity's requests run at
        once under the limit's scope, such as ``3``; decided in the same
        call as the layers, and each slot given back when its request ends
        (see :ref:`concurrency`).
    :param lease: the longest a request holds its slot, in seconds, after
        which a slot whose request never ended (its worker killed) is free
        again; by default ``RATELIMIT_CONCURRENCY_LEASE``.
    :param prefetch: quota leases: each worker takes a block of an
        identity's quota in one call and spends it without asking Redis,
        never admitting more than the quota in a window, for a hot identity
        or an app-wide limit (see :doc:`/leases`). Only with the
        ``"fixed-window"`` strategy, and not with a delay, a penalty,
        ``concurrent`` or ``deduct_when``.
    :raises InvalidLimit: at once, when the decorator is made, if ``spec``
        or an option is malformed.
    :raises TypeError: when it is applied to something that is neither a
        view function nor a blueprint, such as a class. On a class-based
        view, put it on the methods that handle requests (``get``,
        ``post``...) or in the class's ``decorators`` (see
        :ref:`class-based-views`).

    What it returns is also a context manager: ``with limit("3/h"):``
    inside a request decides the limit when the block starts (see
    :ref:`block-limits`).
    """
    return LimitDecorator(make_spec(spec, **options))


class LimitDecorator:
    """What :func:`limit` returns: a decorator for a view or a blueprint, and
    a context manager that decides the limit for the current request when
    its block starts.

    :param spec: the limit and its options, checked.
    """

    __slots__ = ("spec",)

    def __init__(self, spec: LimitSpec) -> None:
        self.spec = spec

    def __call__(self, target: Target) -> Target:
        _check_target(target, "limit")
        # Decorators apply bottom-up; putting this one first keeps the limits
        # in the order they are written. A new tuple rather than a list
        # append, because functools.wraps copies __dict__ shallowly and a
        # wrapped view must not gain its wrapper's limits.
        setattr(target, LIMITS_ATTRIBUTE, (self.spec, *getattr(target, LIMITS_ATTRIBUTE, ())))
        return target

    def __enter__(self) -> None:
        """Decide the limit for the current request, now.

        :raises RateLimitExceeded: when it refuses the request.
        :raises RuntimeError: outside a request, or in an app without the extension.
        """
        state_of().decide_block(self.spec)

    def __exit__(self, *exc: object) -> None:
        return None


#: What an exemption may keep: the inherited limits, by kind.
INHERITED = ("default", "application", "blueprints")


@dataclass(frozen=True)
class Exemption:
    """What :func:`exempt` records on a view or a blueprint.

    :param drops: the kinds of inherited limits it drops, of :data:`INHERITED`.
    :param nested: whether a blueprint's exemption covers the blueprints
        nested in it too.
    :param own_limits: whether it drops the limits put on the exempt view
        or blueprint itself too, whenever they are put there.
    """

    drops: frozenset[str]
    nested: bool = True
    own_limits: bool = False


@overload
def exempt(target: Target, /) -> Target: ...


@overload
def exempt(
    *, keep: Iterable[str] = (), nested: bool = True, own_limits: bool = False
) -> Callable[[Target], Target]: ...


def exempt(
    target: Target | None = None, /, *, keep: Iterable[str] = (), nested: bool = True, own_limits: bool = False
) -> Target | Callable[[Target], Target]:
    """Exempt a view, or every view of a blueprint, from inherited limits.

    .. code-block:: python

        @app.get("/health")
        @exempt
        def health(): ...

        exempt(internal_blueprint)

        @app.get("/search")
        @exempt(keep=["application"])      # no default, but the app's ceiling
        def search(): ...

    Inherited limits are ``RATELIMIT_DEFAULT``, ``RATELIMIT_APPLICATION``
    and the limits of enclosing blueprints. Limits put on the exempt object
    itself, or below it (on a nested blueprint or a view), still apply; see
    :ref:`exempt`.

    :param keep: the inherited limits to keep rather than drop, of
        ``"default"``, ``"application"`` and ``"blueprints"`` (the
        enclosing blueprints' limits). By default none is kept.
    :param nested: for a blueprint, whether the exemption covers the
        blueprints nested in it too (the default), or only its own views.
    :param own_limits: drop the limits put on the exempt view or blueprint
        itself too, before or after the exemption (Flask-Limiter's
        ``exempt``); limits below a blueprint still apply.
    :raises TypeError: when applied to something that is neither a view
        function nor a blueprint.
    :raises ValueError: for a ``keep`` that names something else, or keeps
        everything.
    """
    if isinstance(keep, str) or not all(kind in INHERITED for kind in keep):
        raise ValueError(f"exempt(keep={keep!r}): keep a list of {', '.join(map(repr, INHERITED))}")
    drops = frozenset(INHERITED) - frozenset(keep)
    exemption = Exemption(drops, _flag_of("nested", nested), _flag_of("own_limits", own_limits))
    if not exemption.drops and not exemption.own_limits:
        raise ValueError(f"exempt(keep={keep!r}) keeps every inherited limit and its own: it exempts from nothing")

    def decorate(target: Target) -> Target:
        _check_target(target, "exempt")
        setattr(target, EXEMPT_ATTRIBUTE, exemption)
        return target

    return decorate if target is None else decorate(target)


def exemption_of(target: object) -> Exemption | None:
    """What :func:`exempt` recorded on a view or a blueprint, or None: for a
    front end that decides with the exemptions, such as Flask-Limiter's shim
    (a dynamic limit's fallback to ``RATELIMIT_DEFAULT`` applies only where
    the default is not dropped), and that adds to one with :func:`exempt`.
    """
    exemption: Exemption | None = getattr(target, EXEMPT_ATTRIBUTE, None)
    return exemption


def _flag_of(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"exempt({name}={value!r}): True or False")
    return value


def _check_target(target: object, name: str) -> None:
    # A Flask app and a class are callable too, but an attribute on them
    # would never be read: say so now rather than silently not limiting.
    if isinstance(target, Flask):
        raise TypeError(f"{name}() takes a view function or a blueprint; for the whole app, use RATELIMIT_DEFAULT")
    if isinstance(target, type):
        raise TypeError(
            f"{name}() takes a view function or a blueprint, not the class {target.__qualname__}; "
            "for a class-based view, list it in the class's `decorators`, or put it on its get(), post()... methods"
        )
    if not (callable(target) or isinstance(target, Blueprint)):
        raise TypeError(f"{name}() takes a view function or a blueprint, not {target!r}")
