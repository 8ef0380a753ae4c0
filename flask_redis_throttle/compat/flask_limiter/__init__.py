"""Flask-Limiter 4.x's public names, over flask-redis-throttle.

Replace ``flask_limiter`` with ``flask_redis_throttle.compat.flask_limiter``
in an app's imports: its ``Limiter(...)``, ``@limiter.limit(...)``,
``@limiter.exempt`` and ``RATELIMIT_*`` settings then run through
:class:`~flask_redis_throttle.RateLimit`, its scripts and its storages.
See :doc:`/flask-limiter` for what maps to what, and what is refused.
"""

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
