"""The ``RATELIMIT_*`` settings: their defaults, in one place, and their checks.

Settings are read once, at ``init_app``. A bad value raises
:class:`~flask_redis_throttle.ConfigurationError` there, quoting it.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ._headers import DRAFTS, LEGACY_HEADERS, LegacyNames, partition_secret
from ._identity import IDENTITY_NAMES, IdentitySpec, check_identities
from ._spec import TOKEN, LimitSpec, make_spec
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
    "RATELIMIT_BLUEPRINT_MODE": "add",
    "RATELIMIT_APPLICATION": None,
    "RATELIMIT_META": None,
    "RATELIMIT_HEADERS_ENABLED": True,
    "RATELIMIT_HEADERS_LEGACY": False,
    "RATELIMIT_HEADER_NAMES": {},
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
    "RATELIMIT_HEADERS_DRAFT": 11,
    "RATELIMIT_HEADERS_PARTITION_KEY": False,
    "RATELIMIT_NEAR_LIMIT": 0.8,
    "RATELIMIT_OVERRIDE_BLOCK_STATUS": 429,
    "RATELIMIT_OVERRIDE_WIDEST_IPV4": 16,
    "RATELIMIT_OVERRIDE_WIDEST_IPV6": 48,
    "RATELIMIT_CONCURRENCY_LEASE": 60,
}

#: The scope of ``RATELIMIT_APPLICATION``: no endpoint name starts with ``@``.
APPLICATION_SCOPE = "@app"
#: The scope of ``RATELIMIT_META``.
META_SCOPE = "@meta"
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

#: The fewest bytes ``RATELIMIT_KEY_SECRET`` may have: a shorter one can be
#: found by brute force from a single ``pk`` of the attacker's own address,
#: and then every other address's ``pk`` names its owner.
MIN_KEY_SECRET_BYTES = 32

#: Flask-Limiter's settings that this extension does not read, each with
#: ours that does its job, or None when there is none, and a hint. The same
#: table as in :doc:`/flask-limiter`; a test keeps the two in step.
FLASK_LIMITER_SETTINGS: dict[str, tuple[str | None, str]] = {
    "RATELIMIT_KEY_FUNC": ("RATELIMIT_IDENTITIES", "a list of 'ip', 'user' or key functions of the request"),
    "RATELIMIT_STORAGE_URI": ("RATELIMIT_STORAGE_URL", "note: URL"),
    "RATELIMIT_DEFAULTS_PER_METHOD": ("RATELIMIT_DEFAULT", "{'limit': ..., 'per_method': True}"),
    "RATELIMIT_DEFAULTS_EXEMPT_WHEN": ("RATELIMIT_DEFAULT", "{'limit': ..., 'exempt_when': function}"),
    "RATELIMIT_DEFAULTS_DEDUCT_WHEN": ("RATELIMIT_DEFAULT", "{'limit': ..., 'deduct_when': function}"),
    "RATELIMIT_DEFAULTS_COST": ("RATELIMIT_DEFAULT", "{'limit': ..., 'cost': ...}"),
    "RATELIMIT_APPLICATION_PER_METHOD": ("RATELIMIT_APPLICATION", "{'limit': ..., 'per_method': True}"),
    "RATELIMIT_APPLICATION_EXEMPT_WHEN": ("RATELIMIT_APPLICATION", "{'limit': ..., 'exempt_when': function}"),
    "RATELIMIT_APPLICATION_DEDUCT_WHEN": ("RATELIMIT_APPLICATION", "{'limit': ..., 'deduct_when': function}"),
    "RATELIMIT_APPLICATION_COST": ("RATELIMIT_APPLICATION", "{'limit': ..., 'cost': ...}"),
    "RATELIMIT_HEADER_LIMIT": ("RATELIMIT_HEADER_NAMES", "{'X-RateLimit-Limit': name}"),
    "RATELIMIT_HEADER_REMAINING": ("RATELIMIT_HEADER_NAMES", "{'X-RateLimit-Remaining': name}"),
    "RATELIMIT_HEADER_RESET": ("RATELIMIT_HEADER_NAMES", "{'X-RateLimit-Reset': name}"),
    "RATELIMIT_HEADER_RETRY_AFTER": (None, "Retry-After is a standard header, and keeps its name"),
    "RATELIMIT_HEADER_RETRY_AFTER_VALUE": ("RATELIMIT_RETRY_AFTER", "'http-date' or 'seconds'"),
    "RATELIMIT_SWALLOW_ERRORS": ("RATELIMIT_FAIL_OPEN", "True by default here"),
    "RATELIMIT_FAIL_ON_FIRST_BREACH": (None, "none is needed: every limit is decided at once"),
    "RATELIMIT_ON_BREACH_CALLBACK": ("RATELIMIT_ON_BREACH", "called with a RefusalEvent"),
    "RATELIMIT_IN_MEMORY_FALLBACK": ("RATELIMIT_FALLBACK", "True or False"),
    "RATELIMIT_IN_MEMORY_FALLBACK_ENABLED": ("RATELIMIT_FALLBACK", "True or False"),
    "RATELIMIT_ON_META_BREACH_CALLBACK": ("RATELIMIT_META", "{'limit': ..., 'on_breach': function}"),
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
    default: tuple[LimitSpec, ...]
    default_mode: str
    #: ``RATELIMIT_BLUEPRINT_MODE``: whether a view's own limits that
    #: override the default replace its blueprints' (``"replace"``), or add
    #: up with them (``"add"``).
    blueprint_mode: str
    application: tuple[LimitSpec, ...]
    meta: tuple[LimitSpec, ...]
    headers_enabled: bool
    headers_legacy: bool
    #: The legacy headers' names, when they are sent; None when they are not.
    legacy_names: LegacyNames | None
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
    #: The draft whose form the responses take (``RATELIMIT_HEADERS_DRAFT``).
    headers_draft: int = 11
    #: The key of the ``pk`` digests; None for no ``pk``
    #: (``RATELIMIT_HEADERS_PARTITION_KEY``).
    partition_secret: bytes | None = None
    #: The share of a layer's quota past which an identity is near its
    #: limit, as a fraction (numerator, denominator); None for no signal
    #: (``RATELIMIT_NEAR_LIMIT``).
    near_limit: tuple[int, int] | None = (4, 5)
    override_block_status: int = 429
    override_widest_ipv4: int = 16
    override_widest_ipv6: int = 48
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
        blueprint_mode = config["RATELIMIT_BLUEPRINT_MODE"]
        if blueprint_mode not in DEFAULT_MODES:
            raise ConfigurationError("RATELIMIT_BLUEPRINT_MODE", blueprint_mode, " or ".join(map(repr, DEFAULT_MODES)))
        retry_after = config["RATELIMIT_RETRY_AFTER"]
        if retry_after not in RETRY_AFTER_FORMATS:
            raise ConfigurationError("RATELIMIT_RETRY_AFTER", retry_after, " or ".join(map(repr, RETRY_AFTER_FORMATS)))
        on_breach = config["RATELIMIT_ON_BREACH"]
        if on_breach is not None and not callable(on_breach):
            raise ConfigurationError("RATELIMIT_ON_BREACH", on_breach, "None or a function that takes a RefusalEvent")
        secret = _key_secret(config["RATELIMIT_KEY_SECRET"])
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
        draft = config["RATELIMIT_HEADERS_DRAFT"]
        if not is_integer(draft) or draft not in DRAFTS:
            raise ConfigurationError("RATELIMIT_HEADERS_DRAFT", draft, " or ".join(map(str, DRAFTS)))
        partition = flag("RATELIMIT_HEADERS_PARTITION_KEY")
        if partition and (secret is None or draft < 11):
            raise ConfigurationError(
                "RATELIMIT_HEADERS_PARTITION_KEY",
                partition,
                "False unless RATELIMIT_KEY_SECRET is set (the key of its digests) and RATELIMIT_HEADERS_DRAFT is 11",
            )
        near_limit = config["RATELIMIT_NEAR_LIMIT"]
        if near_limit is not None and not (is_number(near_limit) and 0 < near_limit <= 1):
            raise ConfigurationError("RATELIMIT_NEAR_LIMIT", near_limit, "None, or a number above 0 and at most 1")
        key_secret = secret or b""
        block_status = config["RATELIMIT_OVERRIDE_BLOCK_STATUS"]
        if block_status not in (429, 403) or isinstance(block_status, bool):
            raise ConfigurationError("RATELIMIT_OVERRIDE_BLOCK_STATUS", block_status, "429 or 403")
        widest = {
            key: _prefix_length(config, key, most)
            for key, most in (("RATELIMIT_OVERRIDE_WIDEST_IPV4", 32), ("RATELIMIT_OVERRIDE_WIDEST_IPV6", 128))
        }
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
            default=_limits(config, "RATELIMIT_DEFAULT"),
            default_mode=default_mode,
            blueprint_mode=blueprint_mode,
            application=_limits(config, "RATELIMIT_APPLICATION", APPLICATION_SCOPE),
            meta=_meta_limits(config),
            headers_enabled=flag("RATELIMIT_HEADERS_ENABLED"),
            headers_legacy=flag("RATELIMIT_HEADERS_LEGACY"),
            legacy_names=_legacy_names(config, flag("RATELIMIT_HEADERS_LEGACY")),
            retry_after_http_date=retry_after == "http-date",
            fail_open=flag("RATELIMIT_FAIL_OPEN"),
            identities=identities,
            ipv6_prefix=ipv6_prefix,
            key_secret=key_secret,
            strategy=strategy,
            refusal_log_size=log_size,
            block_cache_size=cache_size,
            breaker_threshold=threshold,
            breaker_backoff=backoff,
            breaker_max_backoff=max_backoff,
            fallback=flag("RATELIMIT_FALLBACK"),
            shadow=flag("RATELIMIT_SHADOW"),
            on_breach=on_breach,
            headers_draft=draft,
            partition_secret=partition_secret(key_secret) if partition else None,
            near_limit=None if near_limit is None else _fraction(near_limit),
            override_block_status=block_status,
            override_widest_ipv4=widest["RATELIMIT_OVERRIDE_WIDEST_IPV4"],
            override_widest_ipv6=widest["RATELIMIT_OVERRIDE_WIDEST_IPV6"],
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


#: What ``RATELIMIT_DEFAULT`` and ``RATELIMIT_APPLICATION`` may hold, for their errors.
LIMIT_SETTING = (
    "None, a limit string, a function of the request, a dict of limit()'s options with the limit "
    "under 'limit', or a list of these"
)


def _limits(config: Mapping[str, Any], key: str, scope: str | None = None) -> tuple[LimitSpec, ...]:
    """The limits a setting holds (see :data:`LIMIT_SETTING`), each checked
    as :func:`~flask_redis_throttle.limit` checks its own. Given ``scope``
    (``RATELIMIT_APPLICATION``'s), a limit without a ``scope`` option counts
    under it, the second under ``scope+2``..., so that two never share a counter."""
    value = config[key]
    items = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
    if value is not None and not items:
        raise ConfigurationError(key, value, LIMIT_SETTING)
    found = []
    for position, item in enumerate(items, 1):
        options = dict(item) if isinstance(item, Mapping) else {"limit": item}
        if "limit" not in options or "override_defaults" in options:
            raise ConfigurationError(key, value, f"{LIMIT_SETTING}; override_defaults is for a view's own limits")
        if scope is not None:
            options.setdefault("scope", scope if position == 1 else f"{scope}+{position}")
        try:
            found.append(make_spec(options.pop("limit"), **options))
        except (InvalidLimit, TypeError) as error:
            raise ConfigurationError(key, value, f"{LIMIT_SETTING} ({error})") from error
    return tuple(found)


def _legacy_names(config: Mapping[str, Any], legacy: bool) -> LegacyNames | None:
    """The legacy headers' names, from ``RATELIMIT_HEADER_NAMES``; None
    when ``RATELIMIT_HEADERS_LEGACY`` is off, which a renaming needs."""
    value = config["RATELIMIT_HEADER_NAMES"]
    expected = f"a dict that renames some of {', '.join(LEGACY_HEADERS)} to other header names"
    if not isinstance(value, Mapping) or not set(value) <= set(LEGACY_HEADERS):
        raise ConfigurationError("RATELIMIT_HEADER_NAMES", value, expected)
    names = tuple(value.get(name, name) for name in LEGACY_HEADERS)
    lowered = [name.lower() for name in names if isinstance(name, str) and TOKEN.fullmatch(name)]
    if len(set(lowered)) != len(LEGACY_HEADERS) or {"ratelimit", "ratelimit-policy", "retry-after"} & set(lowered):
        raise ConfigurationError(
            "RATELIMIT_HEADER_NAMES", value, f"{expected}: distinct, and not RateLimit, RateLimit-Policy or Retry-After"
        )
    if value and not legacy:
        raise ConfigurationError("RATELIMIT_HEADER_NAMES", value, "{} while RATELIMIT_HEADERS_LEGACY is off")
    return LegacyNames(names) if legacy else None


def _meta_limits(config: Mapping[str, Any]) -> tuple[LimitSpec, ...]:
    """``RATELIMIT_META``'s limits, with only the options a meta limit has."""
    found = _limits(config, "RATELIMIT_META", META_SCOPE)
    for spec in found:
        extra = [
            field.name
            for field in dataclasses.fields(spec)
            if field.name not in META_OPTIONS and getattr(spec, field.name) != field.default
        ]
        if extra:
            refused = f"; not {', '.join(extra)}" if extra else ""
            raise ConfigurationError(
                "RATELIMIT_META",
                config["RATELIMIT_META"],
                f"limit strings, or dicts of one with on_breach, identities, scope or error_message{refused}",
            )
    return found


#: What a meta limit has of a limit's options.
META_OPTIONS = frozenset({"limit", "layers", "scope", "identities", "on_breach", "error_message"})


def _fraction(share: float) -> tuple[int, int]:
    """``share`` as the fraction it is written as: 0.8 is 4/5, where the
    float is a little more, and 8 requests of 10 would not be 80 %."""
    fraction = Fraction(str(share))
    return fraction.numerator, fraction.denominator


def _key_secret(secret: Any) -> bytes | None:
    """``RATELIMIT_KEY_SECRET`` as bytes, or None.

    :raises ConfigurationError: unless it is None, or a str or bytes of at
        least :data:`MIN_KEY_SECRET_BYTES` bytes. The message never quotes
        the secret, only its length.
    """
    if secret is None:
        return None
    encoded = secret.encode() if isinstance(secret, str) else secret
    if not isinstance(encoded, bytes) or len(encoded) < MIN_KEY_SECRET_BYTES:
        shown = f"{len(encoded)} bytes" if isinstance(encoded, bytes) else f"a {type(secret).__name__}"
        raise ConfigurationError(
            "RATELIMIT_KEY_SECRET",
            f"<a secret of {shown}, not shown>",
            f"None, or a random str or bytes of at least {MIN_KEY_SECRET_BYTES} bytes, such as the output of "
            "python -c 'import secrets; print(secrets.token_hex(32))'",
        )
    return encoded


def _prefix_length(config: Mapping[str, Any], key: str, most: int) -> int:
    """A network prefix length setting, from 0 to ``most``."""
    value = config[key]
    if not is_integer(value) or not 0 <= value <= most:
        raise ConfigurationError(key, value, f"a prefix length, an integer from 0 to {most}")
    result: int = value
    return result


def _count(value: Any) -> bool:
    """Whether ``value`` is an integer of 0 or more (and not a bool)."""
    return is_integer(value) and value >= 0
