"""The rate limit response headers.

The IETF ``RateLimit-Policy`` and ``RateLimit`` headers
(draft-ietf-httpapi-ratelimit-headers-11): ``RateLimit-Policy: "1s";q=10;w=1,
"1m";q=120;w=60`` names each layer, with ``q`` its quota and ``w`` its window
in seconds, and ``qu`` its quota unit when that is not requests.
``RateLimit: "1s";r=3;t=1`` gives the most constrained layer: ``r`` the
quota it has left and ``t`` the seconds until it resets, rounded up; and,
when asked for, ``pk``, a keyed digest of the identity and scope it counts
(:func:`partition_key`).

Optionally, the older ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``
headers, and ``Retry-After`` as an HTTP-date rather than seconds.

This module makes no Redis call and needs no Flask app.
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import TYPE_CHECKING

from ..core.engine.rates import Layer

if TYPE_CHECKING:
    from werkzeug.datastructures import Headers

    from ..core.engine.keys import Identity
    from ..core.engine.throttle import Decision, Policy


#: The problem type of an exceeded quota (draft-11, section 5.1).
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


@dataclass(frozen=True)
class Draft:
    """The form a draft of the IETF headers gives the responses: chosen once,
    at ``init_app``, from ``RATELIMIT_HEADERS_DRAFT``, and read wherever a
    response is made, so that what a draft means is written here alone."""

    #: The draft's number, the setting's value.
    number: int
    #: Whether ``RateLimit-Policy`` gives the quota unit (``qu``) of a
    #: layer that does not count requests.
    quota_units: bool
    #: Whether ``RateLimit`` may carry a partition key (``pk``:
    #: ``RATELIMIT_HEADERS_PARTITION_KEY``).
    partition_keys: bool
    #: The type and title of a 429's problem details.
    problem_type: str
    problem_title: str
    #: Whether the problem details name the layers exceeded, in
    #: ``violated-policies``.
    violated_policies: bool

    @classmethod
    def of_problem(cls, violated: bool) -> Draft:
        """The draft whose problem details name the layers exceeded, if
        ``violated``, or do not."""
        return next(draft for draft in DRAFTS.values() if draft.violated_policies == violated)


#: The drafts whose form the responses can take (``RATELIMIT_HEADERS_DRAFT``),
#: by number: 11, the default, or 10, the form of 0.2.x (no ``qu``, no
#: ``pk``, and ``about:blank`` problem details).
DRAFTS: dict[int, Draft] = {
    draft.number: draft
    for draft in (
        Draft(10, False, False, "about:blank", "Too Many Requests", False),
        Draft(11, True, True, QUOTA_EXCEEDED, "Quota Exceeded", True),
    )
}
#: The quota unit a layer has unless it says otherwise, left out of the header.
REQUESTS = "requests"
#: The quota unit of a concurrency cap: requests in flight, with no window.
CONCURRENT = "concurrent-requests"
#: The quota units of the draft's registry, the values ``qu`` may take.
UNITS = (REQUESTS, "content-bytes", CONCURRENT)
#: The legacy headers' names, in the order they are sent.
LEGACY_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def policy_header(layers: Iterable[tuple[str, Layer]], units: Sequence[str] = ()) -> str:
    """The ``RateLimit-Policy`` value for named layers.

    :param units: the quota unit of each layer, in the same order; a layer
        of :data:`REQUESTS`, or one past the end of ``units``, gets no
        ``qu``; a concurrency cap (:data:`CONCURRENT`) gets no window.
    """
    items = []
    for place, (name, layer) in enumerate(layers):
        unit = units[place] if place < len(units) else REQUESTS
        if unit == CONCURRENT:
            items.append(f'"{name}";q={layer.quota};qu="{unit}"')
            continue
        quota_unit = "" if unit == REQUESTS else f';qu="{unit}"'
        items.append(f'"{name}";q={layer.quota}{quota_unit};w={layer.window}')
    return ", ".join(items)


def partition_secret(key_secret: bytes) -> bytes:
    """The key of :func:`partition_key`'s digests, made from
    ``RATELIMIT_KEY_SECRET``: not the key of the Redis keys' digests, so
    that a partition key never matches a counter's key."""
    return hashlib.blake2b(b"ratelimit partition key\0" + key_secret, digest_size=32).digest()


def partition_key(secret: bytes, scope: str, identity: Identity) -> str:
    """The ``pk`` parameter for ``identity``'s counters in ``scope``: an SF
    Byte Sequence of 12 bytes of a BLAKE2b digest keyed with ``secret`` (see
    :func:`partition_secret`). The same identity and scope always get the
    same key, so a client can tell its partitions apart; without the secret
    nobody can tell which identity a key stands for, even by trying every
    IPv4 address."""
    raw = "\0".join((scope, identity.kind, identity.value)).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(raw, digest_size=12, key=secret).digest()
    return f":{base64.b64encode(digest).decode('ascii')}:"


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
    #: The quota unit of each policy's layers, in the same order, so that
    #: names made again from these (:meth:`joined`, an override's layers)
    #: keep them.
    units: tuple[str, ...] = ()
    #: The start of each layer's ``RateLimit`` value, by the same keys as
    #: ``names``: made once, so that a response's header is one format.
    heads: dict[tuple[int, int], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        heads = {key: _state_head(name) for key, name in self.names.items()}
        object.__setattr__(self, "heads", heads)

    @classmethod
    def of(cls, policies: Sequence[Policy], units: Sequence[str] = ()) -> LayerNames:
        """Name every layer of ``policies``, in order.

        :param units: the quota unit of each policy's layers, in the same
            order (see :data:`UNITS`); by default, and past its end, requests.
        """
        names: dict[tuple[int, int], str] = {}
        layers = []
        layer_units = []
        units = tuple(units[place] if place < len(units) else REQUESTS for place in range(len(policies)))
        for place, (policy, unit) in enumerate(zip(policies, units, strict=True)):
            for layer in policy.layers:
                name = "conc" if policy.concurrent else layer.name
                if name in names.values():
                    name = f"{name}-{len(names) + 1}"
                names[place, layer.window] = name
                layers.append((name, layer))
                layer_units.append(CONCURRENT if policy.concurrent else unit)
        return cls(policy_header(layers, layer_units), names, tuple(policies), units)

    def joined(self, other: LayerNames) -> LayerNames:
        """The names of these policies, then ``other``'s, each with its unit:
        a ``with limit(...)`` block's beside the view's."""
        return LayerNames.of((*self.policies, *other.policies), (*self.units, *other.units))

    def unit(self, policy: Policy) -> str:
        """The quota unit of one of the policies; requests for another."""
        return next((unit for each, unit in zip(self.policies, self.units, strict=True) if each == policy), REQUESTS)

    def name(self, policy: Policy, layer: Layer) -> str:
        """The name of one layer of one of the policies, as the problem
        details' ``violated-policies`` give it; the layer's own name for a
        policy these names were not made for, rather than an error in the
        middle of a refusal."""
        try:
            return self.names[self.policies.index(policy), layer.window]
        except (ValueError, KeyError):
            return layer.name

    def state(self, policy: Policy, layer: Layer, remaining: int, reset: float) -> str:
        """The ``RateLimit`` value for one layer of one of the policies
        (see :func:`state_header`)."""
        # The policy is found by its place: tuple.index tries each by
        # identity before equality, so the plan's own policy costs no
        # comparison of fields, and an equal one (a dynamic limit's, made
        # again) finds the same names.
        return _state(self.heads[self.policies.index(policy), layer.window], remaining, reset)


#: The headers :func:`set_headers` sets, in lower case, without the legacy ones.
_NAMES = frozenset(["ratelimit-policy", "ratelimit"])
_POLICY, _STATE = "RateLimit-Policy", "RateLimit"


@dataclass(frozen=True)
class LegacyNames:
    """The names the legacy headers are sent under: :data:`LEGACY_HEADERS`,
    or those ``RATELIMIT_HEADER_NAMES`` gives them, in the same order."""

    names: tuple[str, str, str] = LEGACY_HEADERS
    #: Every header :func:`set_headers` sets with them, in lower case.
    lowered: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lowered", _NAMES | {name.lower() for name in self.names})


def set_headers(
    headers: Headers, labels: LayerNames, decision: Decision, legacy: LegacyNames | None, partition: bytes | None = None
) -> None:
    """Set ``RateLimit-Policy`` and ``RateLimit`` on a response's
    ``headers``, replacing any it has (and the legacy ones, under the
    ``legacy`` names, if given).

    :param partition: the key of the ``pk`` digests (see
        :func:`partition_key`), to add the deciding identity's to
        ``RateLimit``; None for no ``pk``.

    A response nearly never has any of them already: then they are added,
    which is what setting them does, without searching the headers once for
    each. Either way through the headers' own public methods, which a
    subclass of the app's may extend.
    """
    layer, remaining = decision.layer, decision.remaining
    state = labels.state(decision.policy, layer, remaining, decision.reset)
    if partition is not None:
        state += ";pk=" + partition_key(partition, decision.policy.scope, decision.identity)
    values = [(_POLICY, labels.policy_header), (_STATE, state)]
    if legacy is not None:
        values += legacy_headers(layer.quota, remaining, decision.reset, time.time(), legacy.names)
    names = legacy.lowered if legacy is not None else _NAMES
    put = headers.add
    for name, _value in headers:
        if name.lower() in names:
            put = headers.set
            break
    for header, value in values:
        put(header, value)


def legacy_headers(
    quota: int, remaining: int, reset: float, now: float, names: tuple[str, str, str] = LEGACY_HEADERS
) -> list[tuple[str, str]]:
    """The ``X-RateLimit-*`` headers of the most constrained layer.

    ``X-RateLimit-Reset`` is the time that layer is back to its full quota,
    in whole seconds since the epoch, rounded up, as Flask-Limiter and
    GitHub send it.

    :param now: the current time, in seconds since the epoch.
    :param names: the names to send them under, in that order.
    """
    limit, left, reset_at = names
    return [
        (limit, str(quota)),
        (left, str(max(remaining, 0))),
        (reset_at, str(math.ceil(now + reset))),
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
