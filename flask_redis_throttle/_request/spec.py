"""One limit, as written in a :func:`~flask_redis_throttle.limit` or
``RATELIMIT_DEFAULT``: its options, defined once in :class:`LimitOptions`,
checked once each and kept in a :class:`LimitSpec`.

The decorators record these on views, and the settings read the default
and application limits with them; neither needs the other.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict

from flask import Request, Response

from ..core.checks import is_integer, is_number
from ..core.engine.leases import LEASABLE, NO_LEASE
from ..core.engine.penalties import Penalty, parse_penalty
from ..core.engine.rates import MAX_QUOTA, MAX_WINDOW, Layer, parse_limits
from ..core.engine.scripts import SHAPING_STRATEGY, STRATEGIES, STRATEGY_NAMES, able, is_strategy
from ..core.engine.throttle import Policy
from ..errors import InvalidLimit
from .headers import REQUESTS, UNITS
from .identity import IDENTITY_NAMES, IdentitySpec, check_identities

if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

if TYPE_CHECKING:
    from ..signals import RefusalEvent

#: A dynamic limit: given the request, a limit string, or None for no limit.
DynamicLimit = Callable[[Request], "str | None"]
#: A cost function: given the request, how much quota it takes.
CostFunction = Callable[[Request], int]
#: A scope function: given the request, the name of the counters it counts in.
ScopeFunction = Callable[[Request], str]
#: An error message function: given the request, the 429's description.
MessageFunction = Callable[[Request], str]
#: Called with a :class:`~flask_redis_throttle.signals.RefusalEvent` when a limit refuses.
RefusalHook = Callable[["RefusalEvent"], object]

#: An HTTP method or header name is a token (RFC 9110): letters, mostly.
TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


@dataclass(frozen=True)
class LimitSpec:
    """One limit, as written in a :func:`limit` or ``RATELIMIT_DEFAULT``,
    parsed and validated. See :func:`limit` for what each option means.

    :param limit: the limit string as written, or the dynamic limit function.
    :param layers: its layers; None for a dynamic limit, whose layers are
        known only per request.
    :param scope: the counters' scope, or a function of the request that
        returns it, or None for the endpoint name.
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
    :param unit: what its quota counts, the ``qu`` of its layers in
        ``RateLimit-Policy``: ``"requests"`` or ``"content-bytes"``.
    :param error_message: the 429's description when this limit refuses,
        or a function of the request that returns it; None for the
        extension's own.
    :param meta: the layers of its meta limit, a limit on how often it
        refuses an identity; None for none.
    :param delay: shaping: the longest a request over the rate waits for its
        turn, in seconds, rather than be refused; 0 to refuse at once.
    :param concurrent: how many of an identity's requests may run at once
        under the limit's scope; None for no cap.
    :param lease: the longest a request holds its slot, in seconds; None
        for ``RATELIMIT_CONCURRENCY_LEASE``.
    :param prefetch: whether each worker takes blocks of the quota and
        spends them in process (see :doc:`/leases`).
    """

    limit: str | DynamicLimit
    layers: tuple[Layer, ...] | None
    scope: str | ScopeFunction | None = None
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
    unit: str = REQUESTS
    error_message: str | MessageFunction | None = None
    meta: tuple[Layer, ...] | None = None
    delay: float = 0.0
    concurrent: int | None = None
    lease: int | None = None
    prefetch: bool = False

    def policy(self, layers: tuple[Layer, ...], scope: str, strategy: str) -> Policy:
        """The policy of this limit's ``layers`` under ``scope`` and
        ``strategy``: a shaped limit on a strategy that bursts (GCRA) spreads its requests one at a time
        (a burst of 1: see :doc:`/shaping`)."""
        burst = 1 if self.delay and STRATEGIES[strategy].bursts else 0
        return Policy(layers, scope, strategy, self.penalty, self.delay, burst)

    @property
    def dynamic(self) -> bool:
        """Whether the limit string comes from a function, per request."""
        return self.layers is None

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

    scope: str | ScopeFunction | None
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
    unit: str
    error_message: str | MessageFunction | None
    meta: str | None
    delay: float | str | bool
    concurrent: int | None
    lease: int | None
    prefetch: bool


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
    _check_concurrency(checked)
    _check_prefetch(checked)
    if checked.get("delay"):
        checked["strategy"] = _shaped_strategy(checked)
    return LimitSpec(spec, layers, **checked)


def _scope(scope: Any) -> str | ScopeFunction | None:
    if scope is not None and not callable(scope) and (not isinstance(scope, str) or not scope):
        raise InvalidLimit(f"scope {scope!r} must be a non-empty string, or a function of the request", spec=scope)
    return scope  # type: ignore[no-any-return]


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


#: The delay of ``delay=True``, and the longest a view's request may be told
#: to wait, in seconds: each waiting request holds a worker (see :doc:`/shaping`).
DEFAULT_DELAY, MAX_DELAY = 0.5, 10.0

_DELAY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*")


def _delay(delay: object) -> float:
    """A delay in seconds: a number of seconds, a string such as ``"250ms"``
    or ``"1.5s"``, or True for :data:`DEFAULT_DELAY`; False or 0 for none."""
    if delay is True:
        return DEFAULT_DELAY
    seconds: float | None = None
    if delay is False:
        seconds = 0.0
    elif is_number(delay):
        seconds = float(delay)
    elif isinstance(delay, str) and len(delay) <= 40 and (found := _DELAY.fullmatch(delay)):
        seconds = float(found[1]) / (1000 if found[2] == "ms" else 1)
    if seconds is None or not 0 <= seconds <= MAX_DELAY:
        raise InvalidLimit(
            f"delay {delay!r} must be a duration from 0 to {MAX_DELAY:g} s, such as '250ms', '1.5s' or 0.25; "
            f"or True for {DEFAULT_DELAY:g} s",
            spec=delay,
        )
    return seconds


def _shaped_strategy(checked: dict[str, Any]) -> str:
    """The strategy of a limit with a delay, given its ``checked`` options:
    the one it names, if it has a delay (see
    :attr:`~flask_redis_throttle.core.engine.scripts.Strategy.delays`), or
    :data:`~flask_redis_throttle.core.engine.scripts.SHAPING_STRATEGY` when it
    names none.

    :raises InvalidLimit: for a strategy without a delay; on one that
        bursts (GCRA), a fixed cost above 1 (such a shaped limit lets its requests go one at a
        time, so one that costs more would never pass); or ``deduct_when``,
        which counts a request after its response, when its turn can no
        longer be reserved.
    """
    strategy, cost = checked.get("strategy") or SHAPING_STRATEGY, checked.get("cost", 1)
    record = STRATEGIES[strategy]
    if not record.delays:
        raise InvalidLimit(
            f"delay needs strategy={able('delays')}, not {strategy!r}: {record.no_delay}; "
            f"leave strategy out for {SHAPING_STRATEGY}",
            spec=strategy,
        )
    if record.bursts and not callable(cost) and cost > 1:
        raise InvalidLimit(
            f"cost {cost} with a delay: a shaped GCRA limit lets requests go one at a time, so none could pass "
            "(strategy='sliding-log' takes any cost)",
            spec=cost,
        )
    if checked.get("deduct_when") is not None:
        raise InvalidLimit(
            "delay with deduct_when: a request's turn is reserved when it is decided, before its response",
            spec=checked["deduct_when"],
        )
    return strategy


def _concurrent(concurrent: object) -> int | None:
    if concurrent is not None and not (is_integer(concurrent) and 1 <= concurrent <= MAX_QUOTA):
        raise InvalidLimit(
            f"concurrent {concurrent!r} must be an integer from 1 to {MAX_QUOTA}: how many requests may run at once",
            spec=concurrent,
        )
    return concurrent


def _lease(lease: object) -> int | None:
    if lease is not None and not (is_integer(lease) and 1 <= lease <= MAX_WINDOW):
        raise InvalidLimit(
            f"lease {lease!r} must be a whole number of seconds from 1 to {MAX_WINDOW}: "
            "the longest a request holds its slot",
            spec=lease,
        )
    return lease


def _check_concurrency(checked: dict[str, Any]) -> None:
    """Refuse the options that make no sense with ``concurrent=``: a lease
    without a cap, and a cap with ``deduct_when``, whose requests are
    counted after the response, when a slot would be taken too late."""
    concurrent = checked.get("concurrent")
    if concurrent is None and checked.get("lease") is not None:
        raise InvalidLimit(f"lease {checked['lease']!r} needs concurrent=, the cap it leases slots of", spec=None)
    if concurrent is not None and checked.get("deduct_when") is not None:
        raise InvalidLimit(
            "concurrent= cannot go with deduct_when=: a request must take its slot before the view runs",
            spec=concurrent,
        )


#: Why ``prefetch=`` cannot go with some options, for the error.
_NO_PREFETCH = {
    "delay": "a shaped request waits for a turn the script reserves for it, which a block taken in advance has not",
    "penalty": "a block refused because other workers took what was left would count as an offence",
    "concurrent": "a slot is held while a request runs, and cannot be taken in advance",
    "deduct_when": "a request counted after its response is counted one at a time",
}


def _check_prefetch(checked: dict[str, Any]) -> None:
    """Refuse ``prefetch=`` on a strategy that cannot lease (see
    :data:`~flask_redis_throttle.core.engine.leases.NO_LEASE`) and with the options
    whose requests are decided one at a time, saying why."""
    if not checked.get("prefetch"):
        return
    for name, why in _NO_PREFETCH.items():
        if checked.get(name):
            raise InvalidLimit(f"prefetch cannot go with {name}=: {why}", spec=checked[name])
    strategy = checked.get("strategy")
    if strategy is not None and strategy not in LEASABLE:
        raise InvalidLimit(
            f"prefetch needs the 'fixed-window' strategy, not {strategy!r}: {NO_LEASE[strategy]}", spec=strategy
        )


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


#: The units a limit's quota may count: the draft's registry's, but for
#: concurrent requests, which a rate does not count.
_LIMIT_UNITS = tuple(unit for unit in UNITS if unit != "concurrent-requests")


def _unit(unit: object) -> str:
    if unit not in _LIMIT_UNITS:
        raise InvalidLimit(f"unit {unit!r} must be one of {_LIMIT_UNITS}", spec=unit)
    return unit


def _error_message(message: Any) -> str | MessageFunction | None:
    if message is not None and not callable(message) and (not isinstance(message, str) or not message):
        raise InvalidLimit(
            f"error_message {message!r} must be a non-empty string, or a function of the request", spec=message
        )
    return message  # type: ignore[no-any-return]


def _meta(meta: object) -> tuple[Layer, ...] | None:
    if meta is None:
        return None
    if not isinstance(meta, str):
        raise InvalidLimit(f"meta {meta!r} must be a limit string, such as '3/h'", spec=meta)
    return parse_limits(meta)


def _penalty(penalty: str | None) -> Penalty | None:
    return None if penalty is None else parse_penalty(penalty)


def _methods(methods: Iterable[str] | None) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, str) or not isinstance(methods, Iterable):
        raise InvalidLimit(f"methods {methods!r} must be a list of HTTP methods, such as ['POST']", spec=methods)
    items = list(methods)
    if not items or not all(isinstance(item, str) and TOKEN.fullmatch(item) for item in items):
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
    "unit": _unit,
    "error_message": _error_message,
    "meta": _meta,
    "delay": _delay,
    "concurrent": _concurrent,
    "lease": _lease,
    "prefetch": partial(_flag, "prefetch"),
}
