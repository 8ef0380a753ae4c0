"""Flask-Limiter's arguments and settings as the extension's ``RATELIMIT_*``
settings: what ``Limiter.init_app`` writes into ``app.config`` before it
sets up the extension, and what it refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from ...errors import ConfigurationError
from ._limits import SEE, Limit, breach_hook, dynamic, identities
from .constants import ConfigVars, HeaderNames

__all__ = ["REFUSED", "STRATEGIES", "THEIR_SETTINGS", "settings", "storage_url"]

#: Flask-Limiter's strategies, by the name of ours that does their job.
STRATEGIES = {
    "fixed-window": "fixed-window",
    "moving-window": "sliding-log",
    "sliding-window-counter": "sliding-window",
}

#: Flask-Limiter's storage URL schemes, by ours; the rest are kept as they are.
SCHEMES = {"redis+unix": "unix", "rediss+cluster": "redis+cluster"}

#: Flask-Limiter's settings that are not the extension's own: read by
#: :meth:`Limiter.init_app`, and hidden from the extension's check of
#: unknown keys while it sets up, since they have been read.
THEIR_SETTINGS = frozenset(
    value
    for name, value in vars(ConfigVars).items()
    if name.isupper()
    and value
    not in {
        "RATELIMIT_ENABLED",
        "RATELIMIT_KEY_PREFIX",
        "RATELIMIT_APPLICATION",
        "RATELIMIT_DEFAULT",
        "RATELIMIT_STRATEGY",
        "RATELIMIT_STORAGE_OPTIONS",
        "RATELIMIT_HEADERS_ENABLED",
    }
)


def unsupported(where: str, value: object, why: str) -> ConfigurationError:
    """The error for an argument or setting the extension has no counterpart for."""
    return ConfigurationError(where, value, f"{why} ({SEE})")


def settings(
    given: Callable[[str], Any], header_name_mapping: Mapping[HeaderNames, str], auto_check: bool
) -> MutableMapping[str, Any]:
    """The extension's settings for Flask-Limiter's: ``given(key)`` is the
    value of a Flask-Limiter setting (the argument, else the app's setting).

    :raises ConfigurationError: for one that has no counterpart here.
    """
    for key, why in REFUSED.items():
        if given(key):
            raise unsupported(key, given(key), why)
    renamed: dict[object, str] = {name: value for name, value in header_name_mapping.items() if name.value != value}
    for key in HEADER_SETTINGS:
        if given(key) is not None:
            renamed[key] = given(key)
    if renamed:
        raise unsupported("header_name_mapping", renamed, "no renaming: the X-RateLimit-* header names are fixed")
    if not auto_check:
        raise unsupported("Limiter(auto_check=False)", False, "True: every request is decided before its view")
    if given(ConfigVars.FAIL_ON_FIRST_BREACH) is False:
        raise unsupported(
            ConfigVars.FAIL_ON_FIRST_BREACH, False, "True: a refused request is counted in no limit, never in some"
        )
    ours: dict[str, Any] = {
        "RATELIMIT_IDENTITIES": identities(given(ConfigVars.KEY_FUNC)) or ["ip"],
        "RATELIMIT_HEADERS_ENABLED": bool(given(ConfigVars.HEADERS_ENABLED)),
        "RATELIMIT_HEADERS_LEGACY": True,
        "RATELIMIT_FAIL_OPEN": bool(given(ConfigVars.SWALLOW_ERRORS)),
        "RATELIMIT_FALLBACK": bool(given(ConfigVars.IN_MEMORY_FALLBACK_ENABLED)),
        "RATELIMIT_STORAGE_OPTIONS": dict(given(ConfigVars.STORAGE_OPTIONS) or {}),
        "RATELIMIT_DEFAULT": layered(ConfigVars.DEFAULT_LIMITS, given, ConfigVars.DEFAULT_LIMITS_EXEMPT_WHEN),
        "RATELIMIT_APPLICATION": layered(
            ConfigVars.APPLICATION_LIMITS, given, ConfigVars.APPLICATION_LIMITS_EXEMPT_WHEN
        ),
        # Flask-Limiter's limits replace the default unless told otherwise.
        "RATELIMIT_DEFAULT_MODE": "replace",
    }
    uri = given(ConfigVars.STORAGE_URI) or "memory://"
    ours["RATELIMIT_STORAGE_URL"] = storage_url(uri)
    if uri.startswith("rediss+cluster://"):
        ours["RATELIMIT_STORAGE_OPTIONS"].setdefault("ssl", True)
    strategy = given(ConfigVars.STRATEGY) or "fixed-window"
    if strategy not in STRATEGIES:
        raise ConfigurationError(ConfigVars.STRATEGY, strategy, f"one of {', '.join(STRATEGIES)}")
    ours["RATELIMIT_STRATEGY"] = STRATEGIES[strategy]
    if given(ConfigVars.KEY_PREFIX):
        ours["RATELIMIT_KEY_PREFIX"] = given(ConfigVars.KEY_PREFIX)
    retry_after = given(ConfigVars.HEADER_RETRY_AFTER_VALUE)
    if retry_after is not None:
        if retry_after not in ("http-date", "delta-seconds"):
            raise ConfigurationError(ConfigVars.HEADER_RETRY_AFTER_VALUE, retry_after, "'http-date' or 'delta-seconds'")
        ours["RATELIMIT_RETRY_AFTER"] = "http-date" if retry_after == "http-date" else "seconds"
    on_breach = given(ConfigVars.ON_BREACH)
    ours["RATELIMIT_ON_BREACH"] = breach_hook(on_breach, None, False)
    return ours


#: Flask-Limiter's settings that have no counterpart here yet, with why.
REFUSED = {
    ConfigVars.DEFAULT_LIMITS_PER_METHOD: "not supported for the default limits: put per_method=True on the views",
    ConfigVars.DEFAULT_LIMITS_DEDUCT_WHEN: "not supported for the default limits: put deduct_when= on the views",
    ConfigVars.DEFAULT_LIMITS_COST: "not supported for the default limits: put cost= on the views",
    ConfigVars.APPLICATION_LIMITS_PER_METHOD: "not supported for the application limits",
    ConfigVars.APPLICATION_LIMITS_DEDUCT_WHEN: "not supported for the application limits",
    ConfigVars.APPLICATION_LIMITS_COST: "not supported for the application limits",
    ConfigVars.META_LIMITS: "no meta limits: use a limit's penalty= for an escalating refusal",
    ConfigVars.ON_META_BREACH: "no meta limits: use a limit's penalty= and on_breach=",
    ConfigVars.REQUEST_IDENTIFIER: "none: counters are named after the endpoint, or a shared limit's scope",
    ConfigVars.IN_MEMORY_FALLBACK: (
        "no limits of its own: in_memory_fallback_enabled=True decides the app's own limits in process"
    ),
}

#: Flask-Limiter's settings that rename a header.
HEADER_SETTINGS = (
    ConfigVars.HEADER_LIMIT,
    ConfigVars.HEADER_REMAINING,
    ConfigVars.HEADER_RESET,
    ConfigVars.HEADER_RETRY_AFTER,
)


def layered(key: str, given: Callable[[str], Any], exempt_key: str) -> Any:
    """``RATELIMIT_DEFAULT`` or ``RATELIMIT_APPLICATION`` for Flask-Limiter's
    list of default or application limits: their limit strings joined, or
    one dynamic limit when any is a function or ``exempt_when`` is given."""
    value = given(key)
    if value is None:
        return None
    items = [value] if isinstance(value, str) or callable(value) else list(value)
    providers: list[str | Callable[[], str]] = []
    for item in items:
        if isinstance(item, Limit):
            if any(getattr(item, field.name) != field.default for field in dataclasses.fields(Limit)[1:]):
                raise unsupported(key, item, "limit strings, or Limit(...) without options of its own")
            item = item.limit_provider
        if not (isinstance(item, str) or callable(item)):
            raise ConfigurationError(key, value, "a list of limit strings or functions that return one")
        providers.append(item)
    exempt_when = given(exempt_key)
    if exempt_when is None and all(isinstance(item, str) for item in providers):
        return ";".join(str(item) for item in providers) or None
    return dynamic(providers, exempt_when)


def storage_url(uri: str) -> str:
    """Flask-Limiter's (the ``limits`` library's) storage URL as the extension's."""
    if not isinstance(uri, str):
        raise ConfigurationError(ConfigVars.STORAGE_URI, uri, "a storage URL string")
    scheme, sep, rest = uri.partition("://")
    if scheme.startswith("async+") or scheme.split("+")[0] in ("memcached", "mongodb", "etcd", "valkey"):
        raise unsupported(ConfigVars.STORAGE_URI, uri, "a Redis URL or memory://: the only storages here")
    return f"{SCHEMES.get(scheme, scheme)}{sep}{rest}"
