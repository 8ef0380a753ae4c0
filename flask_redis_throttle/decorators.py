"""The :func:`limit` and :func:`exempt` decorators. They only record on the view or blueprint, so they need no
extension in scope and work in either order with ``@app.route``; a typo in an option fails at import time."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from flask import Blueprint, Flask, current_app

from ._request.spec import CostFunction, DynamicLimit, LimitOptions, LimitSpec, RefusalHook, make_spec

# At run time too, so that typing.get_type_hints() resolves the options.
if sys.version_info >= (3, 11):
    from typing import Unpack
else:
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

#: The key of the extension's state in ``app.extensions``, where a limit's ``with`` block finds it.
EXTENSION_KEY = "ratelimit"


def state_of(app: Flask | None = None, *, required: bool = True) -> Any:
    """The :class:`~flask_redis_throttle.extension.RateLimitState` of ``app`` or the current app (``Any``: it is
    defined above this module); None if missing and not ``required``.

    :raises RuntimeError: if missing and ``required``.
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
    """Limit a view, or every view of a blueprint: a request passes only if every layer of every identity has
    room. See :doc:`/limits`.

    :param spec: the layers, such as ``"10/s;120/m"`` (:doc:`/grammar`), or a function of the request.
    :param scope: the name to count under, or a function of the request (:ref:`scopes`); by default the endpoint.
    :param identities: whom to count, overriding ``RATELIMIT_IDENTITIES``.
    :param strategy: the algorithm, overriding ``RATELIMIT_STRATEGY`` (:doc:`/algorithms`).
    :param methods: only these HTTP methods (``GET`` covers ``HEAD``); by default every one (:ref:`methods`).
    :param cost: the quota a request takes: an integer or a function of the request (:ref:`cost`).
    :param deduct_when: a function of the response: count the request only when it returns True (:ref:`deduct-when`).
    :param exempt_when: a function of the request: the limit skips requests for which it returns True.
    :param shadow: a dry run: log, send headers and hooks, but let the request through (:ref:`shadow`).
    :param on_breach: called with a :class:`~flask_redis_throttle.signals.RefusalEvent` when this limit refuses.
    :param penalty: refuse an identity that keeps hitting it longer each time, ``"1m;x2;max=1h"`` (:ref:`penalties`).
    :param meta: a limit on how often this limit refuses an identity, such as ``"3/h"`` (:ref:`meta-limits`).
    :param per_method: give each HTTP method the whole quota (:ref:`methods`).
    :param error_message: the 429's description, or a function of the request returning it (:ref:`custom-429`).
    :param override_defaults: whether the view loses ``RATELIMIT_DEFAULT`` (:ref:`default-limits`).
    :param unit: what the quota counts: ``"requests"`` or ``"content-bytes"`` (:ref:`quota-units`).
    :param delay: how long a request over the rate may wait its turn, at most 10 s (:doc:`/shaping`).
    :param concurrent: also cap how many of an identity's requests run at once (:ref:`concurrency`).
    :param lease: the longest a request holds its concurrency slot; by default ``RATELIMIT_CONCURRENCY_LEASE``.
    :param prefetch: the quota each worker takes in one call and spends without Redis (:doc:`/leases`).
    :raises InvalidLimit: when the decorator is made, if ``spec`` or an option is malformed.
    :raises TypeError: when applied to neither a view function nor a blueprint (:ref:`class-based-views`).

    It is also a context manager: ``with limit("3/h"):`` decides the limit when the block starts, raising
    :class:`~flask_redis_throttle.RateLimitExceeded` if it refuses (:ref:`block-limits`).
    """
    return LimitDecorator(make_spec(spec, **options))


@dataclass(frozen=True, eq=False, slots=True)
class LimitDecorator:
    """What :func:`limit` returns: a decorator, and a context manager (:ref:`block-limits`)."""

    spec: LimitSpec

    def __call__(self, target: Target) -> Target:
        _check_target(target, "limit")
        # Prepended, as decorators apply bottom-up; a new tuple, since functools.wraps shares __dict__ with the wrapper.
        setattr(target, LIMITS_ATTRIBUTE, (self.spec, *getattr(target, LIMITS_ATTRIBUTE, ())))
        return target

    def __enter__(self) -> None:
        # RuntimeError outside a request, or in an app without the extension.
        state_of().decide_block(self.spec)

    def __exit__(self, *exc: object) -> None:
        return None


#: What an exemption may keep: the inherited limits, by kind.
INHERITED = ("default", "application", "blueprints")


@dataclass(frozen=True)
class Exemption:
    """What :func:`exempt` records: the kinds of :data:`INHERITED` limits it ``drops``, and its ``nested`` and
    ``own_limits`` as given to it."""

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
    """Exempt a view, or every view of a blueprint, from the limits it inherits (:ref:`exempt`): ``@exempt``, or
    ``@exempt(keep=["application"])``.

    :param keep: the inherited limits to keep, of :data:`INHERITED`; by default none.
    :param nested: whether a blueprint's exemption covers its nested blueprints.
    :param own_limits: drop the limits put on the exempt view or blueprint itself too.
    :raises TypeError: when applied to neither a view function nor a blueprint.
    :raises ValueError: for a ``keep`` that names something else, or keeps everything.
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
    """What :func:`exempt` recorded on a view or a blueprint, or None."""
    exemption: Exemption | None = getattr(target, EXEMPT_ATTRIBUTE, None)
    return exemption


def _flag_of(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"exempt({name}={value!r}): True or False")
    return value


def _check_target(target: object, name: str) -> None:
    # An app and a class are callable too, but nothing reads their attributes.
    if isinstance(target, Flask):
        raise TypeError(f"{name}() takes a view function or a blueprint; for the whole app, use RATELIMIT_DEFAULT")
    if isinstance(target, type):
        raise TypeError(
            f"{name}() takes a view function or a blueprint, not the class {target.__qualname__}; "
            "for a class-based view, list it in the class's `decorators`, or put it on its get(), post()... methods"
        )
    if not (callable(target) or isinstance(target, Blueprint)):
        raise TypeError(f"{name}() takes a view function or a blueprint, not {target!r}")
