"""The IETF ``RateLimit-Policy`` and ``RateLimit`` header values
(draft-ietf-httpapi-ratelimit-headers-10).

``RateLimit-Policy: "1s";q=10;w=1, "1m";q=120;w=60`` names each layer, with
``q`` its quota and ``w`` its window in seconds. ``RateLimit: "1s";r=3;t=1``
gives the most constrained layer: ``r`` the quota it has left and ``t`` the
seconds until it resets, rounded up.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .rates import Rate

__all__ = ["policy_header", "state_header"]


def policy_header(layers: Iterable[tuple[str, Rate]]) -> str:
    """The ``RateLimit-Policy`` value for named layers."""
    return ", ".join(f'"{name}";q={rate.amount};w={rate.period}' for name, rate in layers)


def state_header(name: str, remaining: int, reset: float) -> str:
    """The ``RateLimit`` value for the most constrained layer."""
    return f'"{name}";r={max(remaining, 0)};t={math.ceil(reset)}'
