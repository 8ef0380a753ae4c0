"""The ``RATELIMIT_*`` settings: their defaults, in one place, and their checks.

Settings are read once, at ``init_app``. A bad value raises
:class:`~flask_redis_throttle.ConfigurationError` there, quoting it.
"""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ._identity import IDENTITY_NAMES, IdentitySpec, check_identities
from ._spec import LimitSpec, make_spec
from .core.checks import is_integer, is_number
from .core.rates import MAX_WINDOW
from .core.scripts import STRATEGY_NAMES, is_strategy
from .errors import ConfigurationError, InvalidLimit
from .signals import RefusalEvent

__all__ = [
    "APPLICATION_SCOPE",
    "DEFAULTS",
    "FLASK_LIMITER_SETTINGS",
    "MAX_BREAKER_BACKOFF",
    "MAX_REFUSAL_LOG_SIZE",
    "Settings",
]

logger = logging.getLogger("flask_redis_throttle")

#: Every setting this extension reads, with its default.
DEFAULTS: dict[str, Any] = {
    "RATELIMIT_ENABLED": True,
    "RATELIMIT_STORAGE_URL": "memory://",
    "RATELIMIT_STORAGE_OPTIONS": {},
    "RATELIMIT_KEY_PREFIX": "rl:",
    "RATELIMIT_DEFAULT": None,
    "RATELIMIT_DEFAULT_MODE": "replace",
    "RATELIMIT_APPLICATION": None,
    "RATELIMIT_HEADERS_ENABLED": True,
    "RATELIMIT_HEADERS_LEGACY": False,
    "RATELIMIT_RETRY_AFTER": "seconds",
    "RATELIMIT_FAIL_OPEN": True,
    "RATELIMIT_IDENTITIES": ("ip", "user"),
    "RATELIMIT_IPV6_PREFIX": 64,
    "RATELIMIT_KEY_SECRET": None,
    "RATELIMIT_STRATEGY": "fixed-window",
    "RATELIMIT_REFUSAL_LOG_SIZE": 1000,
    "RATELIMIT_BLOCK_CACHE_SIZE": 10_000,
    "RATELIMIT_BREAKER_THRESHOLD": 3,
    "RATELIMIT_BREAKER_BACKOFF": 1.0,
    "RATELIMIT_BREAKER_MAX_BACKOFF": 30.0,
    "RATELIMIT_FALLBACK": False,
    "RATELIMIT_SHADOW": False,
    "RATELIMIT_ON_BREACH": None,
    "RATELIMIT_CONCURRENCY_LEASE": 60,
}

#: The scope of ``RATELIMIT_APPLICATION``: no endpoint name starts with ``@``.
APPLICATION_SCOPE = "@app"
#: The values of ``RATELIMIT_DEFAULT_MODE``.
DEFAULT_MODES = ("replace", "add")
#: The values of ``RATELIMIT_RETRY_AFTER``.
RETRY_AFTER_FORMATS = ("seconds", "http-date")
#: The most refusals ``RATELIMIT_REFUSAL_LOG_SIZE`` may keep. Redis keeps
#: the whole log in memory, and :meth:`~flask_redis_throttle.RefusalLog.top`
#: reads all of it; a larger value is a typo, and one beyond a 64-bit
#: integer fails every ``XADD``, so that nothing is logged at all.
MAX_REFUSAL_LOG_SIZE = 1_000_000
#: The longest ``RATELIMIT_BREAKER_BACKOFF`` and ``RATELIMIT_BREAKER_MAX_BACKOFF``,
#: in seconds: a day. A breaker that waited longer (``1e308``) would never
#: probe Redis again, and the app would decide without it for good.
MAX_BREAKER_BACKOFF = 86_400.0

#: Flask-Limiter's settings that this extension does not read, each with
#: ours that does its job, or None when there is none, and a hint. The same
#: table as in :doc:`/flask-limiter`; a test keeps the two in step.
FLASK_LIMITER_SETTINGS: dict[str, tuple[str | None, str]] = {
    "RATELIMIT_KEY_FUNC": ("RATELIMIT_IDENTITIES", "a list of 'ip', 'user' or key functions of the request"),
    "RATELIMIT_STORAGE_URI": ("RATELIMIT_STORAGE_URL", "note: URL"),
    "RATELIMIT_DEFAULTS_PER_METHOD": (None, "write one @limit per method, with methods="),
    "RATELIMIT_DEFAULTS_EXEMPT_WHEN": (None, "make RATELIMIT_DEFAULT a function that returns None to exempt"),
    "RATELIMIT_DEFAULTS_DEDUCT_WHEN": (None, "put the limit on a blueprint with deduct_when="),
    "RATELIMIT_DEFAULTS_COST": (None, "put the limit on a blueprint with cost="),
    "RATELIMIT_APPLICATION_PER_METHOD": (None, "write one @limit per method, with methods="),
    "RATELIMIT_APPLICATION_EXEMPT_WHEN": (None, "make RATELIMIT_APPLICATION a function that returns None to exempt"),
    "RATELIMIT_APPLICATION_DEDUCT_WHEN": (None, "put the limit on a blueprint with deduct_when="),
    "RATELIMIT_APPLICATION_COST": (None, "put the limit on a blueprint with cost="),
    "RATELIMIT_HEADER_LIMIT": (None, "the header names are fixed"),
    "RATELIMIT_HEADER_REMAINING": (None, "the header names are fixed"),
    "RATELIMIT_HEADER_RESET": (None, "the header names are fixed"),
    "RATELIMIT_HEADER_RETRY_AFTER": (None, "the header names are fixed"),
    "RATELIMIT_HEADER_RETRY_AFTER_VALUE": ("RATELIMIT_RETRY_AFTER", "'http-date' or 'seconds'"),
    "RATELIMIT_SWALLOW_ERRORS": ("RATELIMIT_FAIL_OPEN", "True by default here"),
    "RATELIMIT_FAIL_ON_FIRST_BREACH": (None, "none is needed: every limit is decided at once"),
    "RATELIMIT_ON_BREACH_CALLBACK": ("RATELIMIT_ON_BREACH", "called with a RefusalEvent"),
    "RATELIMIT_IN_MEMORY_FALLBACK": ("RATELIMIT_FALLBACK", "True or False"),
    "RATELIMIT_IN_MEMORY_FALLBACK_ENABLED": ("RATELIMIT_FALLBACK", "True or False"),
    "RATELIMIT_META": (None, "use @limit(..., penalty=...)"),
    "RATELIMIT_ON_META_BREACH_CALLBACK": (None, "use @limit(..., penalty=...) and the refusal hooks"),
    "RATELIMIT_REQUEST_IDENTIFIER": (None, "counters are named after the endpoint, or the limit's scope="),
}

#: Where the warnings about Flask-Limiter's settings send the reader.
MIGRATION_PAGE = "see 'Coming from Flask-Limiter' in the docs (docs/flask-limiter.rst)"


@dataclass(frozen=True)
class Settings:
    """The validated settings of one app. See :doc:`/config` for each key."""

    enabled: bool
    storage_url: str
    storage_options: Mapping[str, Any]
    key_prefix: str
    default: LimitSpec | None
    default_mode: str
    application: LimitSpec | None
    headers_enabled: bool
    headers_legacy: bool
    retry_after_http_date: bool
    fail_open: bool
    identities: tuple[IdentitySpec, ...]
    ipv6_prefix: int
    key_secret: bytes
    strategy: str
    refusal_log_size: int
    block_cache_size: int
    breaker_threshold: int
    breaker_backoff: float
    breaker_max_backoff: float
    fallback: bool
    shadow: bool
    on_breach: Callable[[RefusalEvent], object] | None
    concurrency_lease: int = DEFAULTS["RATELIMIT_CONCURRENCY_LEASE"]

    @classmethod
    def from_config(cls, config: MutableMapping[str, Any]) -> Settings:
        """Fill in missing defaults on ``config`` and validate every key.

        :raises ConfigurationError: naming the first bad key and its value.
        """
        _warn_unknown(config)
        for key, value in DEFAULTS.items():
            config.setdefault(key, value)

        def flag(key: str) -> bool:
            value = config[key]
            if not isinstance(value, bool):
                raise ConfigurationError(key, value, "True or False")
            return value

        def count(key: str, zero: str, most: int | None = None) -> int:
            value = config[key]
            if not _count(value) or (most is not None and value > most):
                upto = f" up to {most:_}" if most is not None else ""
                raise ConfigurationError(key, value, f"an integer{upto}, {zero}")
            result: int = value
            return result

        def seconds(key: str, least: float, least_name: str) -> float:
            value = config[key]
            if not _seconds(value) or value < least or value > MAX_BREAKER_BACKOFF:
                raise ConfigurationError(
                    key, value, f"a number of seconds {least_name}, at most {MAX_BREAKER_BACKOFF:g} (a day)"
                )
            return float(value)

        prefix = config["RATELIMIT_KEY_PREFIX"]
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ConfigurationError("RATELIMIT_KEY_PREFIX", prefix, "a string without braces")
        options = config["RATELIMIT_STORAGE_OPTIONS"]
        if not isinstance(options, Mapping):
            raise ConfigurationError("RATELIMIT_STORAGE_OPTIONS", options, "a dict of redis.Redis keyword arguments")
        identities = check_identities(config["RATELIMIT_IDENTITIES"])
        if identities is None:
            raise ConfigurationError(
                "RATELIMIT_IDENTITIES",
                config["RATELIMIT_IDENTITIES"],
                f"a non-empty list of {', '.join(map(repr, IDENTITY_NAMES))} or key functions",
            )
        ipv6_prefix = config["RATELIMIT_IPV6_PREFIX"]
        if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int) or not 0 <= ipv6_prefix <= 128:
            raise ConfigurationError("RATELIMIT_IPV6_PREFIX", ipv6_prefix, "an integer from 0 to 128")
        default_mode = config["RATELIMIT_DEFAULT_MODE"]
        if default_mode not in DEFAULT_MODES:
            raise ConfigurationError("RATELIMIT_DEFAULT_MODE", default_mode, " or ".join(map(repr, DEFAULT_MODES)))
        retry_after = config["RATELIMIT_RETRY_AFTER"]
        if retry_after not in RETRY_AFTER_FORMATS:
            raise ConfigurationError("RATELIMIT_RETRY_AFTER", retry_after, " or ".join(map(repr, RETRY_AFTER_FORMATS)))
        on_breach = config["RATELIMIT_ON_BREACH"]
        if on_breach is not None and not callable(on_breach):
            raise ConfigurationError("RATELIMIT_ON_BREACH", on_breach, "None or a function that takes a RefusalEvent")
        secret = config["RATELIMIT_KEY_SECRET"]
        if secret is not None and (not isinstance(secret, (str, bytes)) or not secret):
            raise ConfigurationError("RATELIMIT_KEY_SECRET", secret, "None, or a non-empty str or bytes")
        strategy = config["RATELIMIT_STRATEGY"]
        if not is_strategy(strategy):
            raise ConfigurationError("RATELIMIT_STRATEGY", strategy, f"one of {STRATEGY_NAMES}")
        log_size = count("RATELIMIT_REFUSAL_LOG_SIZE", "0 to keep no log", MAX_REFUSAL_LOG_SIZE)
        cache_size = count("RATELIMIT_BLOCK_CACHE_SIZE", "0 for no cache")
        threshold = count("RATELIMIT_BREAKER_THRESHOLD", "0 for no circuit breaker")
        backoff = seconds("RATELIMIT_BREAKER_BACKOFF", 0.0, "above 0")
        max_backoff = seconds(
            "RATELIMIT_BREAKER_MAX_BACKOFF", backoff, f"at least RATELIMIT_BREAKER_BACKOFF ({backoff:g})"
        )
        lease = config["RATELIMIT_CONCURRENCY_LEASE"]
        if not (is_integer(lease) and 1 <= lease <= MAX_WINDOW):
            raise ConfigurationError(
                "RATELIMIT_CONCURRENCY_LEASE", lease, f"a whole number of seconds from 1 to {MAX_WINDOW}"
            )
        url = config["RATELIMIT_STORAGE_URL"]
        if not isinstance(url, str):
            raise ConfigurationError("RATELIMIT_STORAGE_URL", url, "a URL string")
        return cls(
            enabled=flag("RATELIMIT_ENABLED"),
            storage_url=url,
            storage_options=options,
            key_prefix=prefix,
            default=_limit(config, "RATELIMIT_DEFAULT"),
            default_mode=default_mode,
            application=_limit(config, "RATELIMIT_APPLICATION", APPLICATION_SCOPE),
            headers_enabled=flag("RATELIMIT_HEADERS_ENABLED"),
            headers_legacy=flag("RATELIMIT_HEADERS_LEGACY"),
            retry_after_http_date=retry_after == "http-date",
            fail_open=flag("RATELIMIT_FAIL_OPEN"),
            identities=identities,
            ipv6_prefix=ipv6_prefix,
            key_secret=secret.encode() if isinstance(secret, str) else secret or b"",
            strategy=strategy,
            refusal_log_size=log_size,
            block_cache_size=cache_size,
            breaker_threshold=threshold,
            breaker_backoff=backoff,
            breaker_max_backoff=max_backoff,
            fallback=flag("RATELIMIT_FALLBACK"),
            shadow=flag("RATELIMIT_SHADOW"),
            on_breach=on_breach,
            concurrency_lease=lease,
        )


def _seconds(value: Any) -> bool:
    """Whether ``value`` is a finite number of seconds above 0 (and not a bool)."""
    return is_number(value) and 0 < value < math.inf


def _warn_unknown(config: Mapping[str, Any]) -> None:
    """Log a warning for each ``RATELIMIT_*`` key this extension does not
    read: a Flask-Limiter setting, with ours that does its job, or a typo,
    with the nearest known key. Either would otherwise be silently ignored,
    and an app moving from Flask-Limiter with ``RATELIMIT_STORAGE_URI``
    would limit per process in ``memory://`` without knowing why."""
    for key in sorted(k for k in config if k.startswith("RATELIMIT_") and k not in DEFAULTS):
        logger.warning("%s", _unknown_key_advice(key))


def _unknown_key_advice(key: str) -> str:
    """What to say about ``key``, a ``RATELIMIT_*`` key this extension does not read."""
    if key in FLASK_LIMITER_SETTINGS:
        equivalent, hint = FLASK_LIMITER_SETTINGS[key]
        advice = f"use {equivalent} ({hint})" if equivalent else f"there is no equivalent here: {hint}"
        return f"{key} is a Flask-Limiter setting that flask-redis-throttle ignores; {advice}; {MIGRATION_PAGE}."
    nearest = difflib.get_close_matches(key, DEFAULTS, n=1)
    guess = f"; did you mean {nearest[0]}?" if nearest else ""
    return f"{key} is not a setting of flask-redis-throttle, and is ignored{guess}"


def _limit(config: Mapping[str, Any], key: str, scope: str | None = None) -> LimitSpec | None:
    """The limit a setting holds: None, a limit string, or a function of the request."""
    value = config[key]
    if value is None:
        return None
    try:
        return make_spec(value, scope=scope)
    except InvalidLimit as error:
        raise ConfigurationError(key, value, f"None, a limit string or a function of the request ({error})") from error


def _count(value: Any) -> bool:
    """Whether ``value`` is an integer of 0 or more (and not a bool)."""
    return is_integer(value) and value >= 0
