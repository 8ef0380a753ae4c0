"""Flask-Limiter's ``flask_limiter.constants``: its setting names, header
names and exemption flags, under the same names and values."""

from __future__ import annotations

import enum

__all__ = ["ConfigVars", "ExemptionScope", "HeaderNames"]


class ConfigVars:
    """The names of Flask-Limiter's ``RATELIMIT_*`` settings; see
    :doc:`/flask-limiter` for what each becomes here."""

    ENABLED = "RATELIMIT_ENABLED"
    KEY_FUNC = "RATELIMIT_KEY_FUNC"
    KEY_PREFIX = "RATELIMIT_KEY_PREFIX"
    FAIL_ON_FIRST_BREACH = "RATELIMIT_FAIL_ON_FIRST_BREACH"
    ON_BREACH = "RATELIMIT_ON_BREACH_CALLBACK"
    SWALLOW_ERRORS = "RATELIMIT_SWALLOW_ERRORS"
    APPLICATION_LIMITS = "RATELIMIT_APPLICATION"
    APPLICATION_LIMITS_PER_METHOD = "RATELIMIT_APPLICATION_PER_METHOD"
    APPLICATION_LIMITS_EXEMPT_WHEN = "RATELIMIT_APPLICATION_EXEMPT_WHEN"
    APPLICATION_LIMITS_DEDUCT_WHEN = "RATELIMIT_APPLICATION_DEDUCT_WHEN"
    APPLICATION_LIMITS_COST = "RATELIMIT_APPLICATION_COST"
    DEFAULT_LIMITS = "RATELIMIT_DEFAULT"
    DEFAULT_LIMITS_PER_METHOD = "RATELIMIT_DEFAULTS_PER_METHOD"
    DEFAULT_LIMITS_EXEMPT_WHEN = "RATELIMIT_DEFAULTS_EXEMPT_WHEN"
    DEFAULT_LIMITS_DEDUCT_WHEN = "RATELIMIT_DEFAULTS_DEDUCT_WHEN"
    DEFAULT_LIMITS_COST = "RATELIMIT_DEFAULTS_COST"
    REQUEST_IDENTIFIER = "RATELIMIT_REQUEST_IDENTIFIER"
    STRATEGY = "RATELIMIT_STRATEGY"
    STORAGE_URI = "RATELIMIT_STORAGE_URI"
    STORAGE_OPTIONS = "RATELIMIT_STORAGE_OPTIONS"
    HEADERS_ENABLED = "RATELIMIT_HEADERS_ENABLED"
    HEADER_LIMIT = "RATELIMIT_HEADER_LIMIT"
    HEADER_REMAINING = "RATELIMIT_HEADER_REMAINING"
    HEADER_RESET = "RATELIMIT_HEADER_RESET"
    HEADER_RETRY_AFTER = "RATELIMIT_HEADER_RETRY_AFTER"
    HEADER_RETRY_AFTER_VALUE = "RATELIMIT_HEADER_RETRY_AFTER_VALUE"
    IN_MEMORY_FALLBACK = "RATELIMIT_IN_MEMORY_FALLBACK"
    IN_MEMORY_FALLBACK_ENABLED = "RATELIMIT_IN_MEMORY_FALLBACK_ENABLED"
    META_LIMITS = "RATELIMIT_META"
    ON_META_BREACH = "RATELIMIT_ON_META_BREACH_CALLBACK"


class HeaderNames(enum.Enum):
    """The ``X-RateLimit-*`` headers, sent (with the IETF ones) when
    ``headers_enabled`` is on: the keys of ``header_name_mapping``, which
    renames them (``Retry-After`` keeps its name)."""

    RESET = "X-RateLimit-Reset"
    REMAINING = "X-RateLimit-Remaining"
    LIMIT = "X-RateLimit-Limit"
    RETRY_AFTER = "Retry-After"


class ExemptionScope(enum.Flag):
    """What :meth:`Limiter.exempt <flask_redis_throttle.compat.flask_limiter.Limiter.exempt>`
    drops: the application limits, the default limits, the limits of
    enclosing blueprints (``ANCESTORS``); and whether a blueprint's
    exemption covers nested blueprints (``DESCENDENTS``). ``META`` is
    accepted, and means nothing here."""

    NONE = 0
    APPLICATION = enum.auto()
    META = enum.auto()
    DEFAULT = enum.auto()
    DESCENDENTS = enum.auto()
    ANCESTORS = enum.auto()
