"""The :func:`limit` and :func:`exempt` decorators.

They only record the limit, or the exemption, on the view function or the
blueprint; the extension reads them when an endpoint is first requested. So
they need no extension instance in scope, work in either order with
``@app.route``, and leave ``async def`` views alone. Every option is checked
here, when the decorator is applied, so that a typo fails at import time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from flask import Blueprint, Flask

from ._spec import CostFunction, DynamicLimit, LimitOptions, LimitSpec, RefusalHook, make_spec
from .core.deprecated import renamed

if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "EXEMPT_ATTRIBUTE",
    "LIMITS_ATTRIBUTE",
    "CostFunction",
    "DynamicLimit",
    "LimitOptions",
    "LimitSpec",
    "RefusalHook",
    "exempt",
    "limit",
    "make_spec",
]

#: The attribute of a view function or blueprint that holds its limits.
LIMITS_ATTRIBUTE = "__ratelimits__"
#: The attribute of a view function or blueprint that marks it exempt.
EXEMPT_ATTRIBUTE = "__ratelimit_exempt__"


#: What the decorators accept: a view function or a blueprint.
Target = TypeVar("Target", bound="Callable[..., Any] | Blueprint")


def limit(spec: str | DynamicLimit, **options: Unpack[LimitOptions]) -> Callable[[Target], Target]:
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
        share counters. By default each endpoint counts on its own.
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
    :param per_method: count each HTTP method on its own: ``GET`` and
        ``POST`` each get the whole quota (``HEAD`` counts with ``GET``).
        By default the methods it applies to share its counters.
    :param override_defaults: whether the views this limit is on lose
        ``RATELIMIT_DEFAULT`` (True) or keep it beside this limit (False).
        By default (None), ``RATELIMIT_DEFAULT_MODE`` decides. The default
        applies to a view only if none of its limits overrides it (see
        :ref:`default-limits`).
    :param concurrent: also cap how many of an identity's requests run at
        once under the limit's scope, such as ``3``; decided in the same
        call as the layers, and each slot given back when its request ends
        (see :ref:`concurrency`).
    :param lease: the longest a request holds its slot, in seconds, after
        which a slot whose request never ended (its worker killed) is free
        again; by default ``RATELIMIT_CONCURRENCY_LEASE``.
    :raises InvalidLimit: at once, when the decorator is made, if ``spec``
        or an option is malformed.
    :raises TypeError: when it is applied to something that is neither a
        view function nor a blueprint, such as a class. On a class-based
        view, put it on the methods that handle requests (``get``,
        ``post``...) or in the class's ``decorators`` (see
        :ref:`class-based-views`).
    """
    entry = make_spec(spec, **options)

    def decorate(target: Target) -> Target:
        _check_target(target, "limit")
        # Decorators apply bottom-up; putting this one first keeps the limits
        # in the order they are written. A new tuple rather than a list
        # append, because functools.wraps copies __dict__ shallowly and a
        # wrapped view must not gain its wrapper's limits.
        setattr(target, LIMITS_ATTRIBUTE, (entry, *getattr(target, LIMITS_ATTRIBUTE, ())))
        return target

    return decorate


def exempt(target: Target) -> Target:
    """Exempt a view, or every view of a blueprint, from inherited limits.

    .. code-block:: python

        @app.get("/health")
        @exempt
        def health(): ...

        exempt(internal_blueprint)

    Inherited limits are ``RATELIMIT_DEFAULT`` and the limits of enclosing
    blueprints. Limits put on the exempt object itself, or below it (on a
    nested blueprint or a view), still apply; see :ref:`exempt`.

    :raises TypeError: when applied to something that is neither a view
        function nor a blueprint.
    """
    _check_target(target, "exempt")
    setattr(target, EXEMPT_ATTRIBUTE, True)
    return target


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


#: The old names of renamed things, answered with a DeprecationWarning.
_RENAMED = {"BreachHook": "RefusalHook"}  # old name


def __getattr__(name: str) -> object:
    return renamed(__name__, name, _RENAMED, globals())
