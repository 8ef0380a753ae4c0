"""Flask-Limiter's ``flask_limiter.errors``: the 429 is our :class:`~flask_redis_throttle.RateLimitExceeded`."""

from __future__ import annotations

from ...errors import RateLimitExceeded

__all__ = ["RateLimitExceeded"]
