"""The ``RATELIMIT_*`` settings, read and checked once, at ``init_app``, from one table (see docs/config.rst)."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

from ..core.checks import is_integer_in, is_number
from ..core.engine.rates import MAX_WINDOW
from ..core.engine.scripts import STRATEGY_NAMES, is_strategy
from ..errors import ConfigurationError, InvalidLimit
from ..signals import RefusalEvent
from .headers import DRAFTS, LEGACY_HEADERS, Draft, LegacyNames, partition_secret
from .identity import IDENTITY_NAMES, IdentitySpec, check_identities
from .spec import TOKEN, LimitSpec, make_spec

logger = logging.getLogger("flask_redis_throttle")

#: The scope of ``RATELIMIT_APPLICATION``: no endpoint name starts with ``@``.
APPLICATION_SCOPE = "@app"
#: The scope of ``RATELIMIT_META``.
META_SCOPE = "@meta"
#: The values of ``RATELIMIT_DEFAULT_MODE``.
DEFAULT_MODES = ("replace", "add")
#: The values of ``RATELIMIT_RETRY_AFTER``.
RETRY_AFTER_FORMATS = ("seconds", "http-date")
#: The most refusals ``RATELIMIT_REFUSAL_LOG_SIZE`` may keep (see :doc:`/config`).
MAX_REFUSAL_LOG_SIZE = 1_000_000
#: The longest breaker backoffs, in seconds: a day (see :doc:`/config`).
MAX_BREAKER_BACKOFF = 86_400.0
#: The fewest bytes ``RATELIMIT_KEY_SECRET`` may have (see :doc:`/config`).
MIN_KEY_SECRET_BYTES = 32

#: A check of a setting's value, given every setting: whether it is good.
Check = Callable[[Any, Mapping[str, Any]], bool]
#: How a setting's field is read from its value, given every setting (raising its own error for a bad one).
Read = Callable[[Any, Mapping[str, Any]], Any]


def _is(kind: type) -> Check:
    return lambda value, _: isinstance(value, kind)


def _one_of(*choices: object) -> Check:
    return lambda value, _: (
        not isinstance(value, bool) and any(isinstance(value, type(choice)) and value == choice for choice in choices)
    )


def _integer(least: int, most: float = math.inf) -> Check:
    return lambda value, _: is_integer_in(value, least, most)


def _seconds(least: Callable[[Mapping[str, Any]], float]) -> Check:
    return lambda value, config: is_number(value) and least(config) <= value <= MAX_BREAKER_BACKOFF and value > 0


class Setting(NamedTuple):
    """One setting: its default; its check and what its error says it should be (formatted with the
    settings); how its field is read (None: as it is), and the field's name if not the key's tail."""

    default: Any
    check: Check = lambda value, config: True
    expected: str = ""
    read: Read | None = None
    field: str = ""


_FLAG = "True or False"
_RENAMES = f"a dict that renames some of {', '.join(LEGACY_HEADERS)} to other header names"
_MODES = " or ".join(map(repr, DEFAULT_MODES))


#: Every setting, and how it is read: in this order, so that one is checked before another's check reads it.
SETTINGS: dict[str, Setting] = {
    "RATELIMIT_ENABLED": Setting(True, _is(bool), _FLAG),
    "RATELIMIT_STORAGE_URL": Setting("memory://", _is(str), "a URL string"),
    "RATELIMIT_STORAGE_OPTIONS": Setting(
        {},
        lambda value, _: isinstance(value, Mapping) and all(isinstance(name, str) for name in value),
        "a dict of redis.Redis keyword arguments",
    ),
    "RATELIMIT_KEY_PREFIX": Setting(
        "rl:",
        lambda value, _: isinstance(value, str) and len(value) <= 256 and not {"{", "}"} & set(value),
        "a string of at most 256 characters, without braces",
    ),
    "RATELIMIT_DEFAULT": Setting(None, read=lambda value, _: _limits("RATELIMIT_DEFAULT", value)),
    "RATELIMIT_DEFAULT_MODE": Setting("replace", _one_of(*DEFAULT_MODES), _MODES),
    "RATELIMIT_BLUEPRINT_MODE": Setting("add", _one_of(*DEFAULT_MODES), _MODES),
    "RATELIMIT_APPLICATION": Setting(
        None, read=lambda value, _: _limits("RATELIMIT_APPLICATION", value, APPLICATION_SCOPE)
    ),
    "RATELIMIT_META": Setting(None, read=lambda value, _: _meta_limits(value)),
    "RATELIMIT_HEADERS_ENABLED": Setting(True, _is(bool), _FLAG),
    "RATELIMIT_HEADERS_LEGACY": Setting(False, _is(bool), _FLAG),
    "RATELIMIT_HEADER_NAMES": Setting(
        {},
        lambda value, _: isinstance(value, Mapping) and set(value) <= set(LEGACY_HEADERS),
        _RENAMES,
        lambda value, config: _legacy_names(value, config),
        "legacy_names",
    ),
    "RATELIMIT_RETRY_AFTER": Setting(
        "seconds",
        _one_of(*RETRY_AFTER_FORMATS),
        " or ".join(map(repr, RETRY_AFTER_FORMATS)),
        lambda value, _: value == "http-date",
        "retry_after_http_date",
    ),
    "RATELIMIT_FAIL_OPEN": Setting(True, _is(bool), _FLAG),
    "RATELIMIT_IDENTITIES": Setting(
        ("ip", "user"),
        lambda value, _: check_identities(value) is not None,
        f"a non-empty list of {', '.join(map(repr, IDENTITY_NAMES))} or key functions",
        lambda value, _: check_identities(value),
    ),
    "RATELIMIT_IPV6_PREFIX": Setting(64, _integer(0, 128), "an integer from 0 to 128"),
    "RATELIMIT_KEY_SECRET": Setting(None, read=lambda value, _: _key_secret(value) or b""),
    "RATELIMIT_STRATEGY": Setting("fixed-window", lambda value, _: is_strategy(value), f"one of {STRATEGY_NAMES}"),
    "RATELIMIT_REFUSAL_LOG_SIZE": Setting(
        1000, _integer(0, MAX_REFUSAL_LOG_SIZE), f"an integer up to {MAX_REFUSAL_LOG_SIZE:_}, 0 to keep no log"
    ),
    "RATELIMIT_BLOCK_CACHE_SIZE": Setting(10_000, _integer(0), "an integer, 0 for no cache"),
    "RATELIMIT_BREAKER_THRESHOLD": Setting(3, _integer(0), "an integer, 0 for no circuit breaker"),
    "RATELIMIT_BREAKER_BACKOFF": Setting(
        1.0,
        _seconds(lambda _: 0.0),
        f"a number of seconds above 0, at most {MAX_BREAKER_BACKOFF:g} (a day)",
        lambda value, _: float(value),
    ),
    "RATELIMIT_BREAKER_MAX_BACKOFF": Setting(
        30.0,
        _seconds(lambda config: config["RATELIMIT_BREAKER_BACKOFF"]),
        "a number of seconds at least RATELIMIT_BREAKER_BACKOFF ({RATELIMIT_BREAKER_BACKOFF:g}), "
        f"at most {MAX_BREAKER_BACKOFF:g} (a day)",
        lambda value, _: float(value),
    ),
    "RATELIMIT_FALLBACK": Setting(False, _is(bool), _FLAG),
    "RATELIMIT_SHADOW": Setting(False, _is(bool), _FLAG),
    "RATELIMIT_ON_BREACH": Setting(
        None, lambda value, _: value is None or callable(value), "None or a function that takes a RefusalEvent"
    ),
    "RATELIMIT_HEADERS_DRAFT": Setting(
        11, _one_of(*DRAFTS), " or ".join(map(str, DRAFTS)), lambda value, _: DRAFTS[value], "draft"
    ),
    "RATELIMIT_HEADERS_PARTITION_KEY": Setting(
        False,
        # On, it needs a secret for the digests, and a draft that has pk.
        lambda value, config: (
            value is False
            or (
                value is True
                and config["RATELIMIT_KEY_SECRET"] is not None
                and DRAFTS[config["RATELIMIT_HEADERS_DRAFT"]].partition_keys
            )
        ),
        "True or False, and False unless RATELIMIT_KEY_SECRET is set (the key of its digests) and "
        "RATELIMIT_HEADERS_DRAFT is "
        + " or ".join(str(number) for number, each in DRAFTS.items() if each.partition_keys),
        lambda value, config: partition_secret(_key_secret(config["RATELIMIT_KEY_SECRET"]) or b"") if value else None,
        "partition_secret",
    ),
    "RATELIMIT_NEAR_LIMIT": Setting(
        0.8,
        lambda value, _: value is None or (is_number(value) and 0 < value <= 1),
        "None, or a number above 0 and at most 1",
        # As written: 0.8 is 4/5 (the float is a little more).
        lambda value, _: None if value is None else Fraction(str(value)).as_integer_ratio(),
    ),
    "RATELIMIT_OVERRIDE_BLOCK_STATUS": Setting(429, _one_of(429, 403), "429 or 403"),
    "RATELIMIT_OVERRIDE_WIDEST_IPV4": Setting(16, _integer(0, 32), "a prefix length, an integer from 0 to 32"),
    "RATELIMIT_OVERRIDE_WIDEST_IPV6": Setting(48, _integer(0, 128), "a prefix length, an integer from 0 to 128"),
    "RATELIMIT_CONCURRENCY_LEASE": Setting(
        60, _integer(1, MAX_WINDOW), f"a whole number of seconds from 1 to {MAX_WINDOW}"
    ),
}

#: Every setting this extension reads, with its default.
DEFAULTS: dict[str, Any] = {key: setting.default for key, setting in SETTINGS.items()}

#: Flask-Limiter's settings we do not read: ours that does the job (or None), and a hint (:doc:`/flask-limiter`).
FLASK_LIMITER_SETTINGS: dict[str, tuple[str | None, str]] = {
    "RATELIMIT_KEY_FUNC": ("RATELIMIT_IDENTITIES", "a list of 'ip', 'user' or key functions of the request"),
    "RATELIMIT_STORAGE_URI": ("RATELIMIT_STORAGE_URL", "note: URL"),
    **{
        f"RATELIMIT_{theirs}_{option.upper()}": (f"RATELIMIT_{ours}", f"{{'limit': ..., '{option}': {value}}}")
        for theirs, ours in (("DEFAULTS", "DEFAULT"), ("APPLICATION", "APPLICATION"))
        for option, value in (("per_method", "True"), ("exempt_when", "function"), ("deduct_when", "function"))
    },
    "RATELIMIT_DEFAULTS_COST": ("RATELIMIT_DEFAULT", "{'limit': ..., 'cost': ...}"),
    "RATELIMIT_APPLICATION_COST": ("RATELIMIT_APPLICATION", "{'limit': ..., 'cost': ...}"),
    **{
        f"RATELIMIT_HEADER_{name.upper()}": ("RATELIMIT_HEADER_NAMES", f"{{'X-RateLimit-{name}': name}}")
        for name in ("Limit", "Remaining", "Reset")
    },
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


@dataclass(frozen=True)
class Settings:
    """The validated settings of one app. See :doc:`/config` for each key."""

    enabled: bool
    storage_url: str
    storage_options: Mapping[str, Any]
    key_prefix: str
    default: tuple[LimitSpec, ...]
    default_mode: str
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
    draft: Draft
    #: The key of the ``pk`` digests; None for no ``pk``.
    partition_secret: bytes | None
    #: ``RATELIMIT_NEAR_LIMIT`` as (numerator, denominator); None for no signal.
    near_limit: tuple[int, int] | None
    override_block_status: int
    override_widest_ipv4: int
    override_widest_ipv6: int
    concurrency_lease: int

    @classmethod
    def from_config(cls, config: MutableMapping[str, Any]) -> Settings:
        """Fill in missing defaults on ``config`` and validate every key.

        :raises ConfigurationError: naming the first bad key and its value.
        """
        _warn_unknown(config)
        for key, setting in SETTINGS.items():
            config.setdefault(key, setting.default)
        for key, setting in SETTINGS.items():
            if not setting.check(config[key], config):
                raise ConfigurationError(key, config[key], setting.expected.format_map(config))
        return cls(
            **{
                setting.field or key.removeprefix("RATELIMIT_").lower(): (
                    config[key] if setting.read is None else setting.read(config[key], config)
                )
                for key, setting in SETTINGS.items()
            }
        )


def _warn_unknown(config: Mapping[str, Any]) -> None:
    """Warn of each unknown ``RATELIMIT_*`` key: a Flask-Limiter setting, naming ours, or a typo."""
    for key in sorted(k for k in config if isinstance(k, str) and k.startswith("RATELIMIT_") and k not in DEFAULTS):
        if key in FLASK_LIMITER_SETTINGS:
            equivalent, hint = FLASK_LIMITER_SETTINGS[key]
            advice = f"use {equivalent} ({hint})" if equivalent else f"there is no equivalent here: {hint}"
            logger.warning(
                "%s is a Flask-Limiter setting that flask-redis-throttle ignores; %s; "
                "see 'Coming from Flask-Limiter' in the docs (docs/flask-limiter.rst).",
                key,
                advice,
            )
        else:
            nearest = difflib.get_close_matches(key, DEFAULTS, n=1)
            guess = f"; did you mean {nearest[0]}?" if nearest else ""
            logger.warning("%s is not a setting of flask-redis-throttle, and is ignored%s", key, guess)


#: What ``RATELIMIT_DEFAULT`` and ``RATELIMIT_APPLICATION`` may hold, for their errors.
LIMIT_SETTING = (
    "None, a limit string, a function of the request, a dict of limit()'s options with the limit "
    "under 'limit', or a list of these"
)


def _limits(key: str, value: Any, scope: str | None = None) -> tuple[LimitSpec, ...]:
    """The limits a setting holds, each checked as ``limit()`` checks its own. Given ``scope``, one
    without a ``scope`` option counts under it, the second under ``scope+2``...: two never share a counter."""
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


def _legacy_names(value: Any, config: Mapping[str, Any]) -> LegacyNames | None:
    """The legacy headers' names; None when ``RATELIMIT_HEADERS_LEGACY`` is off."""
    legacy = config["RATELIMIT_HEADERS_LEGACY"]
    names = tuple(value.get(name, name) for name in LEGACY_HEADERS)
    lowered = [name.lower() for name in names if isinstance(name, str) and TOKEN.fullmatch(name)]
    if len(set(lowered)) != len(LEGACY_HEADERS) or {"ratelimit", "ratelimit-policy", "retry-after"} & set(lowered):
        raise ConfigurationError(
            "RATELIMIT_HEADER_NAMES", value, f"{_RENAMES}: distinct, and not RateLimit, RateLimit-Policy or Retry-After"
        )
    if value and not legacy:
        raise ConfigurationError("RATELIMIT_HEADER_NAMES", value, "{} while RATELIMIT_HEADERS_LEGACY is off")
    return LegacyNames(names) if legacy else None


def _meta_limits(value: Any) -> tuple[LimitSpec, ...]:
    """``RATELIMIT_META``'s limits, with only the options a meta limit has."""
    found = _limits("RATELIMIT_META", value, META_SCOPE)
    for spec in found:
        extra = [
            field.name
            for field in dataclasses.fields(spec)
            if field.name not in META_OPTIONS and getattr(spec, field.name) != field.default
        ]
        if extra:
            raise ConfigurationError(
                "RATELIMIT_META",
                value,
                "limit strings, or dicts of one with on_breach, identities, scope or error_message; "
                f"not {', '.join(extra)}",
            )
    return found


#: What a meta limit has of a limit's options.
META_OPTIONS = frozenset({"limit", "layers", "scope", "identities", "on_breach", "error_message"})


def _key_secret(secret: Any) -> bytes | None:
    """``RATELIMIT_KEY_SECRET`` as bytes, or None; an error says its length, never the secret."""
    if secret is None:
        return None
    encoded = secret.encode() if isinstance(secret, str) else secret
    if not isinstance(encoded, bytes) or len(encoded) < MIN_KEY_SECRET_BYTES:
        shown = f"{len(encoded)} bytes" if isinstance(encoded, bytes) else f"type {type(secret).__name__}"
        raise ConfigurationError(
            "RATELIMIT_KEY_SECRET",
            f"<a secret of {shown}, not shown>",
            f"None, or a random str or bytes of at least {MIN_KEY_SECRET_BYTES} bytes, such as the output of "
            "python -c 'import secrets; print(secrets.token_hex(32))'",
        )
    return encoded
