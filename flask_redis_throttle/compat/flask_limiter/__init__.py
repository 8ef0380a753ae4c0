"""Flask-Limiter 4.x's public names over :class:`~flask_redis_throttle.RateLimit` (:doc:`/flask-limiter`)."""

from __future__ import annotations

from ._extension import Limiter
from ._limits import ApplicationLimit, Limit, MetaLimit, RequestLimit, RouteLimit
from .constants import ExemptionScope, HeaderNames
from .errors import RateLimitExceeded

__all__ = [
    "ApplicationLimit",
    "ExemptionScope",
    "HeaderNames",
    "Limit",
    "Limiter",
    "MetaLimit",
    "RateLimitExceeded",
    "RequestLimit",
    "RouteLimit",
]
