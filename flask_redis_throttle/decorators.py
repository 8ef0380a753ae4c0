"""The :func:`limit` view decorator.

It only records the limit on the view function; the extension reads it when
the view is first requested. So it needs no extension instance in scope, works
in either order with ``@app.route``, and leaves ``async def`` views alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .errors import InvalidLimit
from .identity import IDENTITY_NAMES, IdentitySpec, check_identities
from .rates import Rate, parse_limits
from .scripts import STRATEGIES

__all__ = ["LIMITS_ATTRIBUTE", "LimitSpec", "limit"]

#: The attribute of a view function that holds its limits.
LIMITS_ATTRIBUTE = "__ratelimits__"

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class LimitSpec:
    """One ``@limit`` on a view, parsed and validated.

    :param spec: the limit string as written.
    :param rates: its layers.
    :param scope: the counters' scope, or None for the endpoint name.
    :param identities: whom it counts, or None for ``RATELIMIT_IDENTITIES``.
    :param strategy: the algorithm, or None for ``RATELIMIT_STRATEGY``.
    """

    spec: str
    rates: tuple[Rate, ...]
    scope: str | None = None
    identities: tuple[IdentitySpec, ...] | None = None
    strategy: str | None = None


def limit(
    spec: str,
    *,
    scope: str | None = None,
    identities: Sequence[IdentitySpec] | None = None,
    strategy: str | None = None,
) -> Callable[[F], F]:
    """Limit a view. A request passes only if every layer of every identity has room.

    .. code-block:: python

        @app.get("/api/items")
        @limit("10/s;120/m;240/h")
        def items(): ...

    Several ``@limit`` on one view all apply, and are still decided in one
    round trip.

    :param spec: the layers, such as ``"10/s;120/m"``; see :doc:`/grammar`.
    :param scope: the name to count under. Views that give the same scope
        share counters. By default each endpoint counts on its own.
    :param identities: whom to count, overriding ``RATELIMIT_IDENTITIES``:
        ``"ip"``, ``"user"``, ``"user-or-ip"`` or key functions.
    :param strategy: the algorithm, overriding ``RATELIMIT_STRATEGY``:
        ``"fixed-window"``, ``"sliding-window"``, ``"sliding-log"`` or
        ``"gcra"`` (see :doc:`/algorithms`). Limits with different strategies
        on one view are still decided in one round trip.
    :raises InvalidLimit: at once, when the decorator is applied, if ``spec``
        or an option is malformed.
    """
    rates = parse_limits(spec)
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
    entry = LimitSpec(spec, rates, scope, checked, strategy)

    def decorate(view: F) -> F:
        # Decorators apply bottom-up; putting this one first keeps the limits
        # in the order they are written. A new tuple rather than a list
        # append, because functools.wraps copies __dict__ shallowly and a
        # wrapped view must not gain its wrapper's limits.
        setattr(view, LIMITS_ATTRIBUTE, (entry, *getattr(view, LIMITS_ATTRIBUTE, ())))
        return view

    return decorate
