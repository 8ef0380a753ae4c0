"""The :func:`limit` and :func:`exempt` decorators.

They only record the limit, or the exemption, on the view function or the
blueprint; the extension reads them when an endpoint is first requested. So
they need no extension instance in scope, work in either order with
``@app.route``, and leave ``async def`` views alone. Every option is checked
here, when the decorator is applied, so that a typo fails at import time.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from flask import Blueprint, Flask, Request, Response

from ._checks import is_integer
from ._deprecated import renamed, warn_renamed
from .errors import InvalidLimit
from .identity import IDENTITY_NAMES, IdentitySpec, check_identities
from .penalties import Penalty, parse_penalty
from .rates import MAX_QUOTA, Layer, parse_limits
from .scripts import STRATEGY_NAMES, is_strategy

if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

if TYPE_CHECKING:
    from .signals import RefusalEvent

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

#: A dynamic limit: given the request, a limit string, or None for no limit.
DynamicLimit = Callable[[Request], "str | None"]
#: A cost function: given the request, how much quota it takes.
CostFunction = Callable[[Request], int]
#: Called with a :class:`~flask_redis_throttle.signals.RefusalEvent` when a limit refuses.
RefusalHook = Callable[["RefusalEvent"], object]

#: What the decorators accept: a view function or a blueprint.
Target = TypeVar("Target", bound="Callable[..., Any] | Blueprint")

# An HTTP method is a token (RFC 9110): letters, mostly.
_METHOD = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


@dataclass(frozen=True)
class LimitSpec:
    """One limit, as written in a :func:`limit` or ``RATELIMIT_DEFAULT``,
    parsed and validated. See :func:`limit` for what each option means.

    :param limit: the limit string as written, or the dynamic limit function.
    :param layers: its layers; None for a dynamic limit, whose layers are
        known only per request.
    :param scope: the counters' scope, or None for the endpoint name.
    :param identities: whom it counts, or None for ``RATELIMIT_IDENTITIES``.
    :param strategy: the algorithm, or None for ``RATELIMIT_STRATEGY``.
    :param methods: the HTTP methods it applies to, upper case; None for all.
    :param cost: the quota one request takes, or a function of the request.
    :param deduct_when: if given, a request is only counted when this
        returns True for its response.
    :param exempt_when: if given, the limit skips requests for which this
        returns True.
    :param shadow: whether a refusal is only logged, never enforced.
    :param on_breach: called when this limit refuses a request.
    :param penalty: refuses identities that keep hitting the limit for longer.
    :param per_method: whether each HTTP method counts on its own.
    :param override_defaults: whether the limit drops ``RATELIMIT_DEFAULT``
        from its views (True), keeps it (False), or follows
        ``RATELIMIT_DEFAULT_MODE`` (None).
    """

    limit: str | DynamicLimit
    layers: tuple[Layer, ...] | None
    scope: str | None = None
    identities: tuple[IdentitySpec, ...] | None = None
    strategy: str | None = None
    methods: frozenset[str] | None = None
    cost: int | CostFunction = 1
    deduct_when: Callable[[Response], bool] | None = None
    exempt_when: Callable[[Request], bool] | None = None
    shadow: bool = False
    on_breach: RefusalHook | None = None
    penalty: Penalty | None = None
    per_method: bool = False
    override_defaults: bool | None = None

    @property
    def dynamic(self) -> bool:
        """Whether the limit string comes from a function, per request."""
        return self.layers is None

    @property
    def spec(self) -> str | DynamicLimit:  # old name
        """Deprecated: :attr:`limit`."""
        warn_renamed("LimitSpec.spec", "LimitSpec.limit")  # old name
        return self.limit

    @property
    def rates(self) -> tuple[Layer, ...] | None:  # old name
        """Deprecated: :attr:`layers`."""
        warn_renamed("LimitSpec.rates", "LimitSpec.layers")  # old name
        return self.layers

    def applies_to(self, method: str) -> bool:
        """Whether the limit applies to requests of ``method`` (upper case).

        A limit on ``GET`` also covers ``HEAD``, which Flask answers by
        running the ``GET`` view: otherwise ``HEAD`` would be a free way
        around it.
        """
        methods = self.methods
        return methods is None or method in methods or (method == "HEAD" and "GET" in methods)


class LimitOptions(TypedDict, total=False):
    """The options of a limit, by name and type: written once, here, for
    :func:`limit`, ``RATELIMIT_DEFAULT`` and :func:`make_spec`, and each
    checked once, by :func:`make_spec`. See :func:`limit` for what each
    means; one left out takes the default of :class:`LimitSpec`."""

    scope: str | None
    identities: Sequence[IdentitySpec] | None
    strategy: str | None
    methods: Iterable[str] | None
    cost: int | CostFunction
    deduct_when: Callable[[Response], bool] | None
    exempt_when: Callable[[Request], bool] | None
    shadow: bool
    on_breach: RefusalHook | None
    penalty: str | None
    per_method: bool
    override_defaults: bool | None


def make_spec(spec: str | DynamicLimit, **options: Unpack[LimitOptions]) -> LimitSpec:
    """Check a limit and its options, and return them as a :class:`LimitSpec`.

    :param spec: the limit string, or the dynamic limit's function.
    :param options: the :class:`LimitOptions` given, which :func:`limit` takes.
    :raises InvalidLimit: quoting the first bad value found.
    :raises TypeError: for an option that does not exist, as Python would
        for a keyword argument.
    """
    given: dict[str, Any] = dict(options)
    for name in sorted(given.keys() - _CHECKS.keys()):
        raise TypeError(f"limit() got an unexpected keyword argument {name!r}")
    layers = None if callable(spec) else parse_limits(spec)
    checked: dict[str, Any] = {}
    for name, check in _CHECKS.items():
        if name in given:
            checked[name] = check(given[name])
            if name == "cost":
                _check_cost_fits(checked[name], layers, spec)
    return LimitSpec(spec, layers, **checked)


def _scope(scope: object) -> str | None:
    if scope is not None and (not isinstance(scope, str) or not scope):
        raise InvalidLimit(f"scope {scope!r} must be a non-empty string", spec=scope)
    return scope


def _identities(identities: Any) -> tuple[IdentitySpec, ...] | None:
    if identities is None:
        return None
    checked = check_identities(identities)
    if checked is None:
        raise InvalidLimit(
            f"identities {identities!r} must be a non-empty list of "
            f"{', '.join(map(repr, IDENTITY_NAMES))} or key functions",
            spec=identities,
        )
    return checked


def _strategy(strategy: object) -> str | None:
    if strategy is not None and not is_strategy(strategy):
        raise InvalidLimit(f"strategy {strategy!r} must be one of {STRATEGY_NAMES}", spec=strategy)
    return strategy


def _cost(cost: Any) -> int | CostFunction:
    if not callable(cost) and not (is_integer(cost) and 0 <= cost <= MAX_QUOTA):
        raise InvalidLimit(
            f"cost {cost!r} must be an integer from 0 to {MAX_QUOTA}, or a function of the request", spec=cost
        )
    return cost  # type: ignore[no-any-return]


def _check_cost_fits(cost: int | CostFunction, layers: tuple[Layer, ...] | None, spec: str | DynamicLimit) -> None:
    """Refuse a fixed cost that no request could pay: more than a layer's whole quota."""
    if not callable(cost) and layers is not None and cost > min(layer.quota for layer in layers):
        raise InvalidLimit(f"cost {cost} is more than a layer of {spec!r} allows: no request could pass", spec=cost)


def _function(name: str, function: Any) -> Any:
    if function is not None and not callable(function):
        raise InvalidLimit(f"{name} {function!r} must be a function", spec=function)
    return function


def _flag(name: str, flag: object) -> bool:
    if not isinstance(flag, bool):
        raise InvalidLimit(f"{name} {flag!r} must be True or False", spec=flag)
    return flag


def _override_defaults(override_defaults: object) -> bool | None:
    if override_defaults is not None and not isinstance(override_defaults, bool):
        raise InvalidLimit(
            f"override_defaults {override_defaults!r} must be True, False, or None for RATELIMIT_DEFAULT_MODE",
            spec=override_defaults,
        )
    return override_defaults


def _penalty(penalty: str | None) -> Penalty | None:
    return None if penalty is None else parse_penalty(penalty)


def _methods(methods: Iterable[str] | None) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, str) or not isinstance(methods, Iterable):
        raise InvalidLimit(f"methods {methods!r} must be a list of HTTP methods, such as ['POST']", spec=methods)
    items = list(methods)
    if not items or not all(isinstance(item, str) and _METHOD.fullmatch(item) for item in items):
        raise InvalidLimit(f"methods {methods!r} must be a non-empty list of HTTP methods", spec=methods)
    return frozenset(item.upper() for item in items)


#: Each option's check, which returns the value :class:`LimitSpec` keeps, in
#: the order they are checked: a call with two bad options is told of the
#: first. Its keys are :class:`LimitOptions`'.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "scope": _scope,
    "identities": _identities,
    "strategy": _strategy,
    "cost": _cost,
    "deduct_when": partial(_function, "deduct_when"),
    "exempt_when": partial(_function, "exempt_when"),
    "on_breach": partial(_function, "on_breach"),
    "shadow": partial(_flag, "shadow"),
    "per_method": partial(_flag, "per_method"),
    "override_defaults": _override_defaults,
    "methods": _methods,
    "penalty": _penalty,
}


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
