"""flask-redis-throttle: layered rate limits for Flask, decided in one Redis round trip."""

from .decorators import limit
from .errors import ConfigurationError, InvalidLimit, RateLimitError, RateLimitExceeded
from .extension import RateLimit
from .keys import Identity
from .rates import Rate, parse_limits

__all__ = [
    "ConfigurationError",
    "Identity",
    "InvalidLimit",
    "Rate",
    "RateLimit",
    "RateLimitError",
    "RateLimitExceeded",
    "limit",
    "parse_limits",
]

__version__ = "0.1.0"
