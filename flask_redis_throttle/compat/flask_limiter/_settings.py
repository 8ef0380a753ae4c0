"""Flask-Limiter's arguments and settings as the extension's ``RATELIMIT_*`` settings, or refused."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from functools import partial
from typing import Any

from ...errors import ConfigurationError, InvalidLimit
from ...extension import APPLICATION_SCOPE, DEFAULTS
from ._grammar import translate
from ._limits import SEE, Apart, Dynamic, Limit, breach_hook, identities
from .constants import ConfigVars, HeaderNames

#: Flask-Limiter's strategies, by the name of ours that does their job.
STRATEGIES = {
    "fixed-window": "fixed-window",
    "moving-window": "sliding-log",
    "sliding-window-counter": "sliding-window",
}

#: Flask-Limiter's ``Retry-After`` formats, by ours.
RETRY_AFTER = {"http-date": "http-date", "delta-seconds": "seconds"}

#: Flask-Limiter's storage URL schemes, by ours; the rest are kept as they are.
SCHEMES = {"redis+unix": "unix", "rediss+cluster": "redis+cluster"}

#: Flask-Limiter's settings that are not ours (and RATELIMIT_META, which it writes with its
#: own objects): hidden from the extension's check of unknown keys while it sets up.
THEIR_SETTINGS = frozenset(value for name, value in vars(ConfigVars).items() if name.isupper()) - (
    DEFAULTS.keys() - {ConfigVars.META_LIMITS}
)


def unsupported(where: str, value: object, why: str) -> ConfigurationError:
    """The error for an argument or setting the extension has no counterpart for."""
    return ConfigurationError(where, value, f"{why} ({SEE})")


def chosen(key: str, table: Mapping[str, str], default: str, value: Any) -> str:
    """What ``value``, a name of ``table`` (``default`` when empty), stands for there."""
    if (value or default) not in table:
        raise ConfigurationError(key, value, f"one of {', '.join(table)}")
    return table[value or default]


#: Flask-Limiter's settings by ours, each with how read; not when one of its :data:`OPTIONAL` values.
RENAMED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    ConfigVars.KEY_FUNC: ("RATELIMIT_IDENTITIES", lambda value: identities(value) or ["ip"]),
    ConfigVars.HEADERS_ENABLED: ("RATELIMIT_HEADERS_ENABLED", bool),
    ConfigVars.SWALLOW_ERRORS: ("RATELIMIT_FAIL_OPEN", bool),
    ConfigVars.IN_MEMORY_FALLBACK_ENABLED: ("RATELIMIT_FALLBACK", bool),
    ConfigVars.STORAGE_OPTIONS: ("RATELIMIT_STORAGE_OPTIONS", lambda value: dict(value or {})),
    ConfigVars.STORAGE_URI: ("RATELIMIT_STORAGE_URL", lambda value: storage_url(value or "memory://")),
    ConfigVars.STRATEGY: ("RATELIMIT_STRATEGY", partial(chosen, ConfigVars.STRATEGY, STRATEGIES, "fixed-window")),
    ConfigVars.ON_BREACH: ("RATELIMIT_ON_BREACH", lambda value: breach_hook(value, False)),
    ConfigVars.KEY_PREFIX: ("RATELIMIT_KEY_PREFIX", lambda value: value),  # the extension checks it
    ConfigVars.HEADER_RETRY_AFTER_VALUE: (
        "RATELIMIT_RETRY_AFTER",
        partial(chosen, ConfigVars.HEADER_RETRY_AFTER_VALUE, RETRY_AFTER, ""),
    ),
}
OPTIONAL = {ConfigVars.KEY_PREFIX: (None, ""), ConfigVars.HEADER_RETRY_AFTER_VALUE: (None,)}

#: Our settings as every Flask-Limiter app has them.
FIXED = {"RATELIMIT_HEADERS_LEGACY": True, "RATELIMIT_DEFAULT_MODE": "replace", "RATELIMIT_BLUEPRINT_MODE": "replace"}


def settings(
    given: Callable[[str], Any], header_name_mapping: Mapping[HeaderNames, str], auto_check: bool
) -> MutableMapping[str, Any]:
    """Our settings for Flask-Limiter's ``given(key)``; a ConfigurationError for one we have not."""
    for key, why in REFUSED.items():
        if given(key):
            raise unsupported(key, given(key), why)
    if given(ConfigVars.FAIL_ON_FIRST_BREACH) is False:
        raise unsupported(
            ConfigVars.FAIL_ON_FIRST_BREACH, False, "True: a refused request is counted in no limit, never in some"
        )
    if not auto_check:
        raise unsupported("Limiter(auto_check=False)", False, "True: every request is decided before its view")
    renamed = {header.value: name for header, name in header_name_mapping.items() if header.value != name}
    for key, header in HEADER_SETTINGS.items():
        if given(key) is not None and given(key) != header.value:
            renamed[header.value] = given(key)
    if HeaderNames.RETRY_AFTER.value in renamed:
        raise unsupported("header_name_mapping", renamed, "Retry-After is a standard header, and keeps its name")
    ours: dict[str, Any] = {
        name: read(given(key)) for key, (name, read) in RENAMED.items() if given(key) not in OPTIONAL.get(key, ())
    }
    ours.update(FIXED, RATELIMIT_HEADER_NAMES=renamed, RATELIMIT_META=meta_limits(given))
    ours.update(RATELIMIT_DEFAULT=layered(given, *DEFAULT_SETTINGS))
    ours.update(RATELIMIT_APPLICATION=layered(given, *APPLICATION_SETTINGS))
    if str(given(ConfigVars.STORAGE_URI)).startswith("rediss+cluster://"):
        ours["RATELIMIT_STORAGE_OPTIONS"].setdefault("ssl", True)
    return ours


#: Flask-Limiter's settings that have no counterpart here yet, with why.
REFUSED = {
    ConfigVars.REQUEST_IDENTIFIER: "none: counters are named after the endpoint, or a shared limit's scope",
    ConfigVars.IN_MEMORY_FALLBACK: (
        "no limits of its own: in_memory_fallback_enabled=True decides the app's own limits in process"
    ),
}

#: Flask-Limiter's settings that rename a header, with the header.
HEADER_SETTINGS = {getattr(ConfigVars, f"HEADER_{header.name}"): header for header in HeaderNames}
#: Flask-Limiter's settings of the default limits: the limits, then the options every one takes.
OPTIONS = ("", "_PER_METHOD", "_EXEMPT_WHEN", "_DEDUCT_WHEN", "_COST")
DEFAULT_SETTINGS = tuple(getattr(ConfigVars, f"DEFAULT_LIMITS{option}") for option in OPTIONS)
#: The same for the application limits.
APPLICATION_SETTINGS = tuple(getattr(ConfigVars, f"APPLICATION_LIMITS{option}") for option in OPTIONS)


def layered(
    given: Callable[[str], Any], key: str, per_method: str, exempt_when: str, deduct_when: str, cost: str
) -> list[dict[str, Any]] | None:
    """``RATELIMIT_DEFAULT`` or ``RATELIMIT_APPLICATION`` for Flask-Limiter's settings of them."""
    shared = Limit("", cost=given(cost), per_method=bool(given(per_method)))
    shared.exempt_when, shared.deduct_when = given(exempt_when), given(deduct_when)
    return limits_of(key, given(key), shared.options())


def limits_of(key: str, value: Any, shared: dict[str, Any], inherited: bool = False) -> list[dict[str, Any]] | None:
    """Our limits for a Flask-Limiter list: its strings as one, each function as a dynamic one,
    with the ``shared`` options; each ``Limit(...)`` with its own (and ``shared`` if ``inherited``)."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) or callable(value) else list(value)
    base = APPLICATION_SCOPE if key == ConfigVars.APPLICATION_LIMITS else None
    found: list[dict[str, Any]] = []
    strings: list[str] = []
    for item in items:
        if isinstance(item, Limit):
            options = item.options(base) if callable(item.limit_provider) else item.options()
            spec = read(key, value, item.spec)
            found.append({"limit": spec, **(shared if inherited else {}), **options})
        elif isinstance(item, str):
            strings.append(item)
        elif callable(item):
            made = Dynamic(item)
            apart = {} if key == ConfigVars.META_LIMITS else {"scope": Apart(made, base)}  # meta limits have theirs
            found.append({"limit": made, **shared, **apart})
        else:
            raise ConfigurationError(key, value, "a list of limit strings, functions that return one, or Limit(...)")
    if strings:
        joined = read(key, value, lambda: translate(";".join(strings)))
        if joined:
            found.insert(0, {"limit": joined, **shared})
    return found or None


def read(key: str, value: Any, spec: Callable[[], Any]) -> Any:
    """``spec()``; a ConfigurationError where the ``limits`` library rejects it, as in Flask-Limiter."""
    try:
        return spec()
    except InvalidLimit:
        raise
    except ValueError as error:
        raise ConfigurationError(key, value, f"limits as Flask-Limiter writes them: {error}") from None


def meta_limits(given: Callable[[str], Any]) -> list[dict[str, Any]] | None:
    """``RATELIMIT_META`` for Flask-Limiter's ``meta_limits`` and ``on_meta_breach``."""
    shared = Limit("", on_breach=given(ConfigVars.ON_META_BREACH)).options()
    return limits_of(ConfigVars.META_LIMITS, given(ConfigVars.META_LIMITS), shared, True)


def storage_url(uri: str) -> str:
    """The ``limits`` library's storage URL as ours."""
    if not isinstance(uri, str):
        raise ConfigurationError(ConfigVars.STORAGE_URI, uri, "a storage URL string")
    scheme, sep, rest = uri.partition("://")
    if scheme.startswith("async+") or scheme.split("+")[0] in ("memcached", "mongodb", "etcd", "valkey"):
        raise unsupported(ConfigVars.STORAGE_URI, uri, "a Redis URL or memory://: the only storages here")
    return f"{SCHEMES.get(scheme, scheme)}{sep}{rest}"
