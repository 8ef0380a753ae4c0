"""flask-redis-throttle: layered rate limits for Flask, decided in one Redis round trip."""

from .core.engine.keys import Identity
from .core.engine.rates import Layer, parse_limits
from .core.engine.throttle import StorageUnavailable
from .core.stores.refusals import Refusal, RefusalLog
from .current import CurrentLimit, check, current_limit, current_limits
from .decorators import exempt, limit
from .errors import ConfigurationError, InputError, InvalidLimit, RateLimitExceeded
from .extension import RateLimit, near_limit_log, refusal_log
from .signals import RefusalEvent, request_refused

__all__ = [
    "ConfigurationError",
    "CurrentLimit",
    "Identity",
    "InputError",
    "InvalidLimit",
    "Layer",
    "RateLimit",
    "RateLimitExceeded",
    "Refusal",
    "RefusalEvent",
    "RefusalLog",
    "StorageUnavailable",
    "check",
    "current_limit",
    "current_limits",
    "exempt",
    "limit",
    "near_limit_log",
    "parse_limits",
    "refusal_log",
    "request_refused",
]

__version__ = "0.2.0"
