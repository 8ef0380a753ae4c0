"""flask-redis-throttle: layered rate limits for Flask, decided in one Redis round trip."""

from .core.keys import Identity
from .core.rates import Rate, parse_limits
from .core.refusals import Refusal, RefusalLog
from .core.throttle import StorageUnavailable
from .current import CurrentLimit, check, current_limit
from .decorators import exempt, limit
from .errors import ConfigurationError, InvalidLimit, RateLimitError, RateLimitExceeded
from .extension import RateLimit, refusal_log
from .signals import Breach, rate_limited

__all__ = [
    "Breach",
    "ConfigurationError",
    "CurrentLimit",
    "Identity",
    "InvalidLimit",
    "Rate",
    "RateLimit",
    "RateLimitError",
    "RateLimitExceeded",
    "Refusal",
    "RefusalLog",
    "StorageUnavailable",
    "check",
    "current_limit",
    "exempt",
    "limit",
    "parse_limits",
    "rate_limited",
    "refusal_log",
]

__version__ = "0.2.0"
