"""One limit as written in a :func:`~flask_redis_throttle.limit` or a setting: its
:class:`LimitOptions`, checked once each and kept in a :class:`LimitSpec`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from flask import Request, Response

from ..core.checks import is_integer_in, is_number
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
    """One limit, as written in a :func:`limit` or ``RATELIMIT_DEFAULT``, validated: each field but
    the first two is the option of :func:`limit` of its name, as :func:`make_spec` reads it; None
    where :func:`limit` says it falls back on a setting.

    :param limit: the limit string as written, or the dynamic limit function.
    :param layers: its layers; None for a dynamic limit.
    :param methods: upper case, as a set.
    :param penalty: parsed, as a :class:`~flask_redis_throttle.core.engine.penalties.Penalty`.
    :param meta: parsed, as layers.
    :param delay: in seconds.
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
        return Policy(layers, scope, strategy, self.penalty, self.delay, shaped_burst(self.delay, strategy))

    @property
    def dynamic(self) -> bool:
        """Whether the limit string comes from a function, per request."""
        return self.layers is None

    def applies_to(self, method: str) -> bool:
        """Whether it applies to requests of ``method`` (upper case); ``GET`` covers ``HEAD``, as in Flask."""
        methods = self.methods
        return methods is None or method in methods or (method == "HEAD" and "GET" in methods)


class LimitOptions(TypedDict, total=False):
    """The options of a limit, by name and type, for :func:`limit`, ``RATELIMIT_DEFAULT`` and
    :func:`make_spec`, which checks them. See :func:`limit`; one left out takes :class:`LimitSpec`'s default."""

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
    :param options: the :class:`LimitOptions` given.
    :raises InvalidLimit: quoting the first bad value found.
    :raises TypeError: for an option that does not exist, as Python would for a keyword argument.
    """
    for name in sorted(options.keys() - _OPTIONS.keys()):
        raise TypeError(f"limit() got an unexpected keyword argument {name!r}")
    layers = None if callable(spec) else parse_limits(spec)
    checked: dict[str, Any] = {}
    for name, (read, expected) in _OPTIONS.items():
        if name in options:
            value = options[name]  # type: ignore[literal-required]
            checked[name] = read(value)
            if checked[name] is _BAD:
                raise InvalidLimit(f"{name} {value!r} must be {expected}", spec=value)
    for (option, other), why in _APART.items():
        if given(checked.get(option)) and given(checked.get(other)):
            raise InvalidLimit(f"{option}= cannot go with {other}=: {why}", spec=checked[other])
    if given(checked.get("lease")) and not given(checked.get("concurrent")):
        raise InvalidLimit(f"lease {checked['lease']!r} needs concurrent=, the cap it leases slots of", spec=None)
    delay = checked.get("delay", 0.0)
    if given(delay):
        checked["strategy"] = checked.get("strategy") or SHAPING_STRATEGY
    strategy = checked.get("strategy")
    for option, (ability, reason) in _NEEDS.items():
        if given(checked.get(option)) and strategy is not None and not getattr(STRATEGIES[strategy], ability):
            raise InvalidLimit(
                f"{option} needs strategy={able(ability)}, not {strategy!r}: {getattr(STRATEGIES[strategy], reason)}"
                + (f"; leave strategy out for {SHAPING_STRATEGY}" if option == "delay" else ""),
                spec=strategy,
            )
    cost, burst = checked.get("cost", 1), shaped_burst(delay, strategy) if strategy else 0
    most = burst or (None if layers is None else min(layer.quota for layer in layers))
    if not callable(cost) and most is not None and cost > most:
        shaped = " with a delay" if burst else ""
        raise InvalidLimit(
            f"cost {cost} is more than {spec!r} lets go at once{shaped} ({most}): no request could pass", spec=cost
        )
    return LimitSpec(spec, layers, **checked)


def shaped_burst(delay: float, strategy: str) -> int:
    """A policy's burst: 1 if shaped on a strategy that bursts, to spread requests one at a time; else 0."""
    return 1 if delay and STRATEGIES[strategy].bursts else 0


#: A value an option's reading finds bad.
_BAD: Any = object()


def given(value: object) -> bool:
    """Whether an option read as ``value`` is in use: not None, False or 0. Never ask the value's truth:
    a callable object with a ``__len__`` of 0 is in use all the same."""
    return not (value is None or value is False or (isinstance(value, int | float) and value == 0))


def _kept(good: Callable[[Any], bool]) -> Callable[[Any], Any]:
    return lambda value: value if good(value) else _BAD


def _text_or_function(value: object) -> bool:
    return value is None or callable(value) or (isinstance(value, str) and value != "")


def _bounded(least: int, most: int, function: bool = False) -> Callable[[Any], bool]:
    return lambda value: (
        (value is None and not function) or (function and callable(value)) or is_integer_in(value, least, most)
    )


#: The delay of ``delay=True``, and the longest a request may wait, in seconds: each holds a worker.
DEFAULT_DELAY, MAX_DELAY = 0.5, 10.0

_DELAY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*")


def _delay(delay: object) -> Any:
    """Seconds from seconds, ``"250ms"``, ``"1.5s"`` or True for :data:`DEFAULT_DELAY`; False or 0 for none."""
    if delay is True or delay is False:
        return DEFAULT_DELAY if delay else 0.0
    seconds = delay if is_number(delay) else None  # compared before float(), which 10**400 overflows
    if isinstance(delay, str) and len(delay) <= 40 and (found := _DELAY.fullmatch(delay)):
        seconds = float(found[1]) / (1000 if found[2] == "ms" else 1)
    return float(seconds) if seconds is not None and 0 <= seconds <= MAX_DELAY else _BAD


def _methods(methods: object) -> Any:
    if methods is None:
        return None
    items = [] if isinstance(methods, str) or not isinstance(methods, Iterable) else list(methods)
    good = items and all(isinstance(item, str) and TOKEN.fullmatch(item) for item in items)
    return frozenset(item.upper() for item in items) if good else _BAD


#: The units a limit's quota may count: all but concurrent requests.
_LIMIT_UNITS = tuple(unit for unit in UNITS if unit != "concurrent-requests")
_FUNCTION = (_kept(lambda value: value is None or callable(value)), "a function")
_FLAG = (_kept(lambda value: isinstance(value, bool)), "True or False")

#: Each option, in the order checked: its reading (to what :class:`LimitSpec` keeps, or _BAD) and what it must be.
_OPTIONS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "scope": (_kept(_text_or_function), "a non-empty string, or a function of the request"),
    "identities": (
        lambda value: None if value is None else check_identities(value) or _BAD,
        f"a non-empty list of {', '.join(map(repr, IDENTITY_NAMES))} or key functions",
    ),
    "strategy": (_kept(lambda value: value is None or is_strategy(value)), f"one of {STRATEGY_NAMES}"),
    "cost": (
        _kept(_bounded(0, MAX_QUOTA, function=True)),
        f"an integer from 0 to {MAX_QUOTA}, or a function of the request",
    ),
    "deduct_when": _FUNCTION,
    "exempt_when": _FUNCTION,
    "on_breach": _FUNCTION,
    "shadow": _FLAG,
    "per_method": _FLAG,
    "override_defaults": (
        _kept(lambda value: value is None or isinstance(value, bool)),
        "True, False, or None for RATELIMIT_DEFAULT_MODE",
    ),
    "methods": (_methods, "a non-empty list of HTTP methods, such as ['POST']"),
    "penalty": (lambda value: None if value is None else parse_penalty(value), ""),
    "unit": (_kept(lambda value: value in _LIMIT_UNITS), f"one of {_LIMIT_UNITS}"),
    "error_message": (_kept(_text_or_function), "a non-empty string, or a function of the request"),
    "meta": (
        lambda value: None if value is None else parse_limits(value) if isinstance(value, str) else _BAD,
        "a limit string, such as '3/h'",
    ),
    "delay": (
        _delay,
        f"a duration from 0 to {MAX_DELAY:g} s, such as '250ms', '1.5s' or 0.25; or True for {DEFAULT_DELAY:g} s",
    ),
    "concurrent": (
        _kept(_bounded(1, MAX_QUOTA)),
        f"an integer from 1 to {MAX_QUOTA}: how many requests may run at once",
    ),
    "lease": (
        _kept(_bounded(1, MAX_WINDOW)),
        f"a whole number of seconds from 1 to {MAX_WINDOW}: the longest a request holds its slot",
    ),
    "prefetch": _FLAG,
}

#: The options that cannot go together, and why, in the order they are checked.
_APART = {
    ("concurrent", "deduct_when"): "a request must take its slot before the view runs",
    ("delay", "deduct_when"): "a request's turn is reserved when it is decided, before its response",
    ("prefetch", "delay"): "a shaped request waits for a turn the script reserves for it, "
    "which a block taken in advance has not",
    ("prefetch", "penalty"): "a block refused because other workers took what was left would count as an offence",
    ("prefetch", "concurrent"): "a slot is held while a request runs, and cannot be taken in advance",
    ("prefetch", "deduct_when"): "a request counted after its response is counted one at a time",
}

#: The options that need a strategy able to, by the ``Strategy`` properties that say it can and why not.
_NEEDS = {"delay": ("delays", "no_delay"), "prefetch": ("leases", "no_lease")}
