"""One limit, as written in a :func:`~flask_redis_throttle.limit` or
``RATELIMIT_DEFAULT``: its options checked and kept in a :class:`LimitSpec`.

The decorators record these on views, and the settings read the default
and application limits with them; neither needs the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import Request, Response

from ._identity import IDENTITY_NAMES, IdentitySpec, check_identities
from .core.penalties import Penalty, parse_penalty
from .core.rates import MAX_QUOTA, Layer, parse_limits
from .core.scripts import STRATEGIES
from .errors import InvalidLimit

if TYPE_CHECKING:
    from .signals import RefusalEvent

__all__ = ["CostFunction", "DynamicLimit", "LimitSpec", "RefusalHook", "make_spec"]

#: A dynamic limit: given the request, a limit string, or None for no limit.
DynamicLimit = Callable[[Request], "str | None"]
#: A cost function: given the request, how much quota it takes.
CostFunction = Callable[[Request], int]
#: Called with a :class:`~flask_redis_throttle.signals.RefusalEvent` when a limit refuses.
RefusalHook = Callable[["RefusalEvent"], object]

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
    :param penalty: blocks identities that keep hitting the limit.
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

    def applies_to(self, method: str) -> bool:
        """Whether the limit applies to requests of ``method`` (upper case).

        A limit on ``GET`` also covers ``HEAD``, which Flask answers by
        running the ``GET`` view: otherwise ``HEAD`` would be a free way
        around it.
        """
        methods = self.methods
        return methods is None or method in methods or (method == "HEAD" and "GET" in methods)


def make_spec(
    spec: str | DynamicLimit,
    *,
    scope: str | None = None,
    identities: Sequence[IdentitySpec] | None = None,
    strategy: str | None = None,
    methods: Iterable[str] | None = None,
    cost: int | CostFunction = 1,
    deduct_when: Callable[[Response], bool] | None = None,
    exempt_when: Callable[[Request], bool] | None = None,
    shadow: bool = False,
    on_breach: RefusalHook | None = None,
    penalty: str | None = None,
    per_method: bool = False,
    override_defaults: bool | None = None,
) -> LimitSpec:
    """Check a limit and its options, and return them as a :class:`LimitSpec`.

    :raises InvalidLimit: quoting the first bad value.
    """
    rates = None if callable(spec) else parse_limits(spec)
    if scope is not None and (not isinstance(scope, str) or not scope):
        raise InvalidLimit(f"scope {scope!r} must be a non-empty string", spec=scope)
    checked = None
    if identities is not None:
        checked = check_identities(identities)
        if checked is None:
            raise InvalidLimit(
                f"identities {identities!r} must be a non-empty list of "
                f"{', '.join(map(repr, IDENTITY_NAMES))} or key functions",
                spec=identities,
            )
    if strategy is not None and (not isinstance(strategy, str) or strategy not in STRATEGIES):
        raise InvalidLimit(f"strategy {strategy!r} must be one of {', '.join(map(repr, STRATEGIES))}", spec=strategy)
    if not callable(cost):
        if isinstance(cost, bool) or not isinstance(cost, int) or not 0 <= cost <= MAX_QUOTA:
            raise InvalidLimit(
                f"cost {cost!r} must be an integer from 0 to {MAX_QUOTA}, or a function of the request", spec=cost
            )
        if rates is not None and cost > min(layer.quota for layer in rates):
            raise InvalidLimit(f"cost {cost} is more than a layer of {spec!r} allows: no request could pass", spec=cost)
    for name, function in (("deduct_when", deduct_when), ("exempt_when", exempt_when), ("on_breach", on_breach)):
        if function is not None and not callable(function):
            raise InvalidLimit(f"{name} {function!r} must be a function", spec=function)
    for name, flag in (("shadow", shadow), ("per_method", per_method)):
        if not isinstance(flag, bool):
            raise InvalidLimit(f"{name} {flag!r} must be True or False", spec=flag)
    if override_defaults is not None and not isinstance(override_defaults, bool):
        raise InvalidLimit(
            f"override_defaults {override_defaults!r} must be True, False, or None for RATELIMIT_DEFAULT_MODE",
            spec=override_defaults,
        )
    return LimitSpec(
        spec,
        rates,
        scope,
        checked,
        strategy,
        _methods(methods),
        cost,
        deduct_when,
        exempt_when,
        shadow,
        on_breach,
        None if penalty is None else parse_penalty(penalty),
        per_method,
        override_defaults,
    )


def _methods(methods: Iterable[str] | None) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, str) or not isinstance(methods, Iterable):
        raise InvalidLimit(f"methods {methods!r} must be a list of HTTP methods, such as ['POST']", spec=methods)
    items = list(methods)
    if not items or not all(isinstance(item, str) and _METHOD.fullmatch(item) for item in items):
        raise InvalidLimit(f"methods {methods!r} must be a non-empty list of HTTP methods", spec=methods)
    return frozenset(item.upper() for item in items)
