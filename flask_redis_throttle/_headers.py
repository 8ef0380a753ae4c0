"""The rate limit response headers.

The IETF ``RateLimit-Policy`` and ``RateLimit`` headers
(draft-ietf-httpapi-ratelimit-headers-10): ``RateLimit-Policy: "1s";q=10;w=1,
"1m";q=120;w=60`` names each layer, with ``q`` its quota and ``w`` its window
in seconds. ``RateLimit: "1s";r=3;t=1`` gives the most constrained layer:
``r`` the quota it has left and ``t`` the seconds until it resets, rounded up.

Optionally, the older ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``
headers, and ``Retry-After`` as an HTTP-date rather than seconds.

This module makes no Redis call and needs no Flask app.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from .core.deprecated import renamed
from .core.rates import Layer

if TYPE_CHECKING:
    from werkzeug.datastructures import Headers

    from .core.throttle import Decision, Policy

__all__ = ["LayerNames", "legacy_headers", "policy_header", "retry_after_value", "set_headers", "state_header"]


def policy_header(layers: Iterable[tuple[str, Layer]], slots: frozenset[str] = frozenset()) -> str:
    """The ``RateLimit-Policy`` value for named layers; those named in
    ``slots`` are concurrency caps, in concurrent requests and with no window."""
    return ", ".join(
        f'"{name}";q={layer.quota};qu="concurrent-requests"'
        if name in slots
        else f'"{name}";q={layer.quota};w={layer.window}'
        for name, layer in layers
    )


def state_header(name: str, remaining: int, reset: float) -> str:
    """The ``RateLimit`` value for the most constrained layer."""
    return _state(_state_head(name), remaining, reset)


def _state_head(name: str) -> str:
    """The part of a ``RateLimit`` value that names the layer."""
    return f'"{name}";r='


def _state(head: str, remaining: int, reset: float) -> str:
    """A ``RateLimit`` value: its head, then the quota left and the seconds to the reset."""
    return f"{head}{max(remaining, 0)};t={math.ceil(reset)}"


@dataclass(frozen=True)
class LayerNames:
    """The names of the layers of the policies that apply to a response, and
    the ``RateLimit-Policy`` value that lists them.

    A layer is named after its window (``"1s"``, ``"1m"``), and a
    concurrency cap ``"conc"``; when two layers of different policies have
    the same name, the later one gets its position added (``"1m-3"``), so
    that ``RateLimit`` names one layer without doubt.
    """

    #: The ``RateLimit-Policy`` value.
    policy_header: str
    #: The name of each layer, by (the policy's place in :attr:`policies`,
    #: window in seconds).
    names: dict[tuple[int, int], str]
    #: The policies, in order.
    policies: tuple[Policy, ...]
    #: The start of each layer's ``RateLimit`` value, by the same keys as
    #: ``names``: made once, so that a response's header is one format.
    heads: dict[tuple[int, int], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        heads = {key: _state_head(name) for key, name in self.names.items()}
        object.__setattr__(self, "heads", heads)

    @classmethod
    def of(cls, policies: Sequence[Policy]) -> LayerNames:
        """Name every layer of ``policies``, in order."""
        names: dict[tuple[int, int], str] = {}
        layers = []
        slots = set()
        for place, policy in enumerate(policies):
            for layer in policy.layers:
                name = "conc" if policy.concurrent else layer.name
                if name in names.values():
                    name = f"{name}-{len(names) + 1}"
                if policy.concurrent:
                    slots.add(name)
                names[place, layer.window] = name
                layers.append((name, layer))
        return cls(policy_header(layers, frozenset(slots)), names, tuple(policies))

    def name(self, policy: Policy, layer: Layer) -> str:
        """The name of one layer of one of the policies."""
        return self.names[self.policies.index(policy), layer.window]

    def state(self, policy: Policy, layer: Layer, remaining: int, reset: float) -> str:
        """The ``RateLimit`` value for one layer of one of the policies
        (see :func:`state_header`)."""
        # The policy is found by its place: tuple.index tries each by
        # identity before equality, so the plan's own policy costs no
        # comparison of fields, and an equal one (a dynamic limit's, made
        # again) finds the same names. _state's format, inlined: this runs
        # once per response.
        head = self.heads[self.policies.index(policy), layer.window]
        return f"{head}{max(remaining, 0)};t={math.ceil(reset)}"


#: The headers :func:`set_headers` sets, in lower case: always, and with the legacy ones.
_NAMES = frozenset(["ratelimit-policy", "ratelimit"])
_LEGACY_NAMES = _NAMES | {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
_POLICY, _STATE = "RateLimit-Policy", "RateLimit"


def set_headers(headers: Headers, labels: LayerNames, decision: Decision, legacy: bool) -> None:
    """Set ``RateLimit-Policy`` and ``RateLimit`` on a response's
    ``headers``, replacing any it has (and the ``X-RateLimit-*`` ones, if
    ``legacy``).

    A response nearly never has any of them already: then they are added,
    which is what setting them does, without searching the headers once for
    each. They are appended to Werkzeug's list of the headers itself, when
    it has one: its ``add`` checks each value for newlines, which these,
    made here of numbers and the layers' names, cannot hold.
    """
    layer, remaining = decision.layer, decision.remaining
    values = [
        (_POLICY, labels.policy_header),
        (_STATE, labels.state(decision.policy, layer, remaining, decision.reset)),
    ]
    if legacy:
        values += legacy_headers(layer.quota, remaining, decision.reset, time.time())
    names = _LEGACY_NAMES if legacy else _NAMES
    items: Any = getattr(headers, "_list", None)  # Werkzeug's own list, if it has one
    own = type(items) is list
    for name, _value in items if own else headers:
        if name.lower() in names:
            for header, value in values:
                headers.set(header, value)
            return
    if own:
        items += values
    else:
        for header, value in values:
            headers.add(header, value)


def legacy_headers(quota: int, remaining: int, reset: float, now: float) -> list[tuple[str, str]]:
    """The ``X-RateLimit-*`` headers of the most constrained layer.

    ``X-RateLimit-Reset`` is the time that layer is back to its full quota,
    in whole seconds since the epoch, rounded up, as Flask-Limiter and
    GitHub send it.

    :param now: the current time, in seconds since the epoch.
    """
    return [
        ("X-RateLimit-Limit", str(quota)),
        ("X-RateLimit-Remaining", str(max(remaining, 0))),
        ("X-RateLimit-Reset", str(math.ceil(now + reset))),
    ]


def retry_after_value(retry_after: float, http_date: bool, now: float) -> str:
    """The ``Retry-After`` value for a wait of ``retry_after`` seconds.

    Whole seconds, rounded up and at least 1; or, with ``http_date``, the
    moment ``now + retry_after`` as an HTTP-date, rounded up to the next
    whole second, since an HTTP-date has no fractions. Either way, a client
    that waits as told is never early.

    :param now: the current time, in seconds since the epoch.
    """
    if http_date:
        return formatdate(math.ceil(now + max(retry_after, 1)), usegmt=True)
    return str(max(1, math.ceil(retry_after)))


#: The old names of renamed things, answered with a DeprecationWarning.
_RENAMED = {"Labels": "LayerNames"}  # old name


def __getattr__(name: str) -> object:
    return renamed(__name__, name, _RENAMED, globals())
