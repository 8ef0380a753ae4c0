"""Flask-Limiter's ``flask_limiter.errors``: the 429 is the extension's own
:class:`~flask_redis_throttle.RateLimitExceeded`, a subclass of werkzeug's
``TooManyRequests`` as Flask-Limiter's is."""

from __future__ import annotations

from ...errors import RateLimitExceeded

__all__ = ["RateLimitExceeded"]
