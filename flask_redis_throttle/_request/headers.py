"""The rate limit response headers: the IETF ``RateLimit-Policy`` and
``RateLimit`` (draft-ietf-httpapi-ratelimit-headers-11), the legacy
``X-RateLimit-*`` ones and ``Retry-After``. See docs/responses.rst. No Redis, no Flask app.
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from collections.abc import Sequence
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
    """The form a draft of the IETF headers gives the responses (``RATELIMIT_HEADERS_DRAFT``)."""

    #: The draft's number, the setting's value.
    number: int
    #: Whether ``RateLimit-Policy`` gives a layer's quota unit (``qu``) but for requests.
    quota_units: bool
    #: Whether ``RateLimit`` may carry a partition key (``pk``).
    partition_keys: bool
    #: The type and title of a 429's problem details.
    problem_type: str
    problem_title: str
    #: Whether the problem details name the layers exceeded, in ``violated-policies``.
    violated_policies: bool

    @classmethod
    def of_problem(cls, violated: bool) -> Draft:
        """The draft whose problem details name the layers exceeded, or do not (``violated``)."""
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


def partition_secret(key_secret: bytes) -> bytes:
    """The key of :func:`partition_key`'s digests, from ``RATELIMIT_KEY_SECRET``: never a counter key's."""
    return hashlib.blake2b(b"ratelimit partition key\0" + key_secret, digest_size=32).digest()


def partition_key(secret: bytes, scope: str, identity: Identity) -> str:
    """The ``pk`` of ``identity``'s counters in ``scope``: 12 bytes of a BLAKE2b digest keyed with
    ``secret``, which no one without it can tell an identity by, even trying every IPv4 address."""
    raw = "\0".join((scope, identity.kind, identity.value)).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(raw, digest_size=12, key=secret).digest()
    return f":{base64.b64encode(digest).decode('ascii')}:"


@dataclass(frozen=True)
class LayerNames:
    """The names of the layers of the policies that apply to a response, and the
    ``RateLimit-Policy`` value that lists them (named as :ref:`headers` says).
    """

    #: The ``RateLimit-Policy`` value.
    policy_header: str
    #: The name of each layer, by the policy's place in :attr:`policies` and the window.
    names: dict[tuple[int, int], str]
    policies: tuple[Policy, ...]
    #: The quota unit of each policy's layers, kept by names made again from these.
    units: tuple[str, ...] = ()
    #: The start of each layer's ``RateLimit`` value, by the same keys as ``names``.
    heads: dict[tuple[int, int], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        heads = {key: f'"{name}";r=' for key, name in self.names.items()}
        object.__setattr__(self, "heads", heads)

    @classmethod
    def of(cls, policies: Sequence[Policy], units: Sequence[str] = ()) -> LayerNames:
        """Name every layer of ``policies``, in order.

        :param units: each policy's quota unit (see :data:`UNITS`); by default, and past its end, requests.
        """
        names: dict[tuple[int, int], str] = {}
        items = []  # each layer's in RateLimit-Policy: a cap's has no window, a unit but requests a qu
        units = tuple(units[place] if place < len(units) else REQUESTS for place in range(len(policies)))
        for place, (policy, unit) in enumerate(zip(policies, units, strict=True)):
            for layer in policy.layers:
                name = "conc" if policy.concurrent else layer.name
                if name in names.values():
                    name = f"{name}-{len(names) + 1}"
                names[place, layer.window] = name
                if policy.concurrent or unit == CONCURRENT:
                    items.append(f'"{name}";q={layer.quota};qu="{CONCURRENT}"')
                else:
                    quota_unit = "" if unit == REQUESTS else f';qu="{unit}"'
                    items.append(f'"{name}";q={layer.quota}{quota_unit};w={layer.window}')
        return cls(", ".join(items), names, tuple(policies), units)

    def joined(self, other: LayerNames) -> LayerNames:
        """These names, then ``other``'s: a ``with limit(...)`` block's beside the view's."""
        return LayerNames.of((*self.policies, *other.policies), (*self.units, *other.units))

    def unit(self, policy: Policy) -> str:
        """The quota unit of one of the policies; requests for another."""
        return next((unit for each, unit in zip(self.policies, self.units, strict=True) if each == policy), REQUESTS)

    def name(self, policy: Policy, layer: Layer) -> str:
        """The name of one layer of one of the policies, as ``violated-policies`` gives it; the
        layer's own name for another policy, rather than an error in the middle of a refusal."""
        try:
            return self.names[self.policies.index(policy), layer.window]
        except (ValueError, KeyError):
            return layer.name

    def state(self, policy: Policy, layer: Layer, remaining: int, reset: float) -> str:
        """The ``RateLimit`` value for one layer of one of the policies: its
        name, the quota left and the seconds to the reset, rounded up."""
        # tuple.index tries identity before equality: an equal policy (a dynamic limit's) is found too.
        head = self.heads[self.policies.index(policy), layer.window]
        return f"{head}{max(remaining, 0)};t={math.ceil(reset)}"


#: The headers :func:`set_headers` sets, in lower case, without the legacy ones.
_NAMES = frozenset(["ratelimit-policy", "ratelimit"])


@dataclass(frozen=True)
class LegacyNames:
    """The legacy headers' names: :data:`LEGACY_HEADERS`, or ``RATELIMIT_HEADER_NAMES``'s, in that order."""

    names: tuple[str, str, str] = LEGACY_HEADERS
    #: Every header :func:`set_headers` sets with them, in lower case.
    lowered: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lowered", _NAMES | {name.lower() for name in self.names})


def set_headers(
    headers: Headers, labels: LayerNames, decision: Decision, legacy: LegacyNames | None, partition: bytes | None = None
) -> None:
    """Set ``RateLimit-Policy`` and ``RateLimit`` (and the ``legacy`` ones, if given) on ``headers``,
    replacing any; with a ``partition`` secret, ``RateLimit`` carries the deciding identity's ``pk``."""
    layer, remaining = decision.layer, decision.remaining
    state = labels.state(decision.policy, layer, remaining, decision.reset)
    if partition is not None:
        state += ";pk=" + partition_key(partition, decision.policy.scope, decision.identity)
    values = [("RateLimit-Policy", labels.policy_header), ("RateLimit", state)]
    if legacy is not None:
        values += legacy_headers(layer.quota, remaining, decision.reset, time.time(), legacy.names)
    names = legacy.lowered if legacy is not None else _NAMES
    put = headers.add  # a response nearly never has them: no search for each
    for name, _value in headers:
        if name.lower() in names:
            put = headers.set
            break
    for header, value in values:
        put(header, value)


def legacy_headers(
    quota: int, remaining: int, reset: float, now: float, names: tuple[str, str, str] = LEGACY_HEADERS
) -> list[tuple[str, str]]:
    """The ``X-RateLimit-*`` headers of the most constrained layer (see :ref:`legacy-headers`).

    :param now: the current time, in seconds since the epoch.
    :param names: the names to send them under, in that order.
    """
    limit, left, reset_at = names
    return [(limit, str(quota)), (left, str(max(remaining, 0))), (reset_at, str(math.ceil(now + reset)))]


def retry_after_value(retry_after: float, http_date: bool, now: float) -> str:
    """The ``Retry-After`` value for a wait of ``retry_after`` seconds: whole seconds, rounded up and
    at least 1; or, with ``http_date``, ``now + retry_after`` as an HTTP-date, rounded up to the
    second. Either way, a client that waits as told is never early.

    :param now: the current time, in seconds since the epoch.
    """
    if http_date:
        return formatdate(math.ceil(now + max(retry_after, 1)), usegmt=True)
    return str(max(1, math.ceil(retry_after)))
