"""Flask-Limiter's arguments and settings as the extension's ``RATELIMIT_*`` settings, or refused."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TypeVar

from ...errors import ConfigurationError
from ...extension import APPLICATION_SCOPE, DEFAULTS
from ._limits import FUNCTION, OPTIONS, SEE, Apart, Dynamic, Limit, breach_hook, identities, translate
from .constants import ConfigVars, HeaderNames

T = TypeVar("T")

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

#: Flask-Limiter's settings that are not ours (and RATELIMIT_META, of its objects): hidden from the extension's check.
THEIR_SETTINGS = frozenset(value for name, value in vars(ConfigVars).items() if name.isupper()) - (
    DEFAULTS.keys() - {ConfigVars.META_LIMITS}
)


def unsupported(where: str, value: object, why: str) -> ConfigurationError:
    return ConfigurationError(where, value, f"{why} ({SEE})")


def read(key: str, value: Any, how: Callable[[Any], T], takes: str) -> T:
    """``how(value)``, or a ConfigurationError naming Flask-Limiter's setting ``key`` and what it ``takes``."""
    try:
        return how(value)
    except ConfigurationError:
        raise
    except (TypeError, ValueError, LookupError) as error:
        raise ConfigurationError(key, value, f"{takes}: {error}" if isinstance(error, ValueError) else takes) from None


def one_of(table: Mapping[str, str]) -> str:
    return f"one of {', '.join(table)}"


LIMITS = "a limit string, a function that returns one, Limit(...), or a list of these"


#: Flask-Limiter's settings by ours, each with how read and what it takes; not when one of its :data:`OPTIONAL` values.
RENAMED: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    ConfigVars.KEY_FUNC: ("RATELIMIT_IDENTITIES", lambda value: identities(value) or ["ip"], FUNCTION),
    ConfigVars.HEADERS_ENABLED: ("RATELIMIT_HEADERS_ENABLED", bool, ""),
    ConfigVars.SWALLOW_ERRORS: ("RATELIMIT_FAIL_OPEN", bool, ""),
    ConfigVars.IN_MEMORY_FALLBACK_ENABLED: ("RATELIMIT_FALLBACK", bool, ""),
    ConfigVars.STORAGE_OPTIONS: ("RATELIMIT_STORAGE_OPTIONS", lambda value: {**(value or {})}, "a dict of options"),
    ConfigVars.STORAGE_URI: ("RATELIMIT_STORAGE_URL", lambda value: storage_url(value or "memory://"), "a storage URL"),
    ConfigVars.STRATEGY: ("RATELIMIT_STRATEGY", lambda value: STRATEGIES[value or "fixed-window"], one_of(STRATEGIES)),
    ConfigVars.ON_BREACH: ("RATELIMIT_ON_BREACH", breach_hook, FUNCTION),
    ConfigVars.KEY_PREFIX: ("RATELIMIT_KEY_PREFIX", lambda value: value, ""),  # the extension checks it
    ConfigVars.HEADER_RETRY_AFTER_VALUE: ("RATELIMIT_RETRY_AFTER", RETRY_AFTER.__getitem__, one_of(RETRY_AFTER)),
}
OPTIONAL = {ConfigVars.KEY_PREFIX: (None, ""), ConfigVars.HEADER_RETRY_AFTER_VALUE: (None,)}

#: Our settings as every Flask-Limiter app has them.
FIXED = {"RATELIMIT_HEADERS_LEGACY": True, "RATELIMIT_DEFAULT_MODE": "replace", "RATELIMIT_BLUEPRINT_MODE": "replace"}


def settings(given: Callable[[str], Any], header_name_mapping: Mapping[HeaderNames, str]) -> MutableMapping[str, Any]:
    """Our settings for Flask-Limiter's ``given(key)``; a ConfigurationError for one we have not."""
    for key, why in REFUSED.items():
        if given(key):
            raise unsupported(key, given(key), why)
    if given(ConfigVars.FAIL_ON_FIRST_BREACH) is False:
        raise unsupported(
            ConfigVars.FAIL_ON_FIRST_BREACH, False, "True: a refused request is counted in no limit, never in some"
        )
    renamed = read("header_name_mapping", header_name_mapping, header_names, "a dict of HeaderNames to names")
    for key, header in HEADER_SETTINGS.items():
        if given(key) is not None and given(key) != header.value:
            renamed[header.value] = given(key)
    if HeaderNames.RETRY_AFTER.value in renamed:
        raise unsupported("header_name_mapping", renamed, "Retry-After is a standard header, and keeps its name")
    ours: dict[str, Any] = {
        name: read(key, given(key), how, takes)
        for key, (name, how, takes) in RENAMED.items()
        if given(key) not in OPTIONAL.get(key, ())
    }
    ours.update(FIXED, RATELIMIT_HEADER_NAMES=renamed)
    ours.update({key: layered(given, key) for key in LAYERED})
    if str(given(ConfigVars.STORAGE_URI)).startswith("rediss+cluster://"):
        ours["RATELIMIT_STORAGE_OPTIONS"].setdefault("ssl", True)
    return ours


def header_names(mapping: Mapping[HeaderNames, str]) -> dict[str, str]:
    """``header_name_mapping``'s headers that it renames, by name."""
    headers = {HeaderNames(header).value: name for header, name in dict(mapping).items()}
    return {header: name for header, name in headers.items() if header != name}


#: Flask-Limiter's settings that have no counterpart here yet, with why.
REFUSED = {
    ConfigVars.REQUEST_IDENTIFIER: "none: counters are named after the endpoint, or a shared limit's scope",
    ConfigVars.IN_MEMORY_FALLBACK: (
        "no limits of its own: in_memory_fallback_enabled=True decides the app's own limits in process"
    ),
}

#: Flask-Limiter's settings that rename a header, with the header.
HEADER_SETTINGS = {getattr(ConfigVars, f"HEADER_{header.name}"): header for header in HeaderNames}
#: Flask-Limiter's settings of limits (ours have the same names), each with those of their options, as OPTIONS.
LAYERED = {
    getattr(ConfigVars, kind): {
        getattr(ConfigVars, f"{kind}_{field.upper()}"): OPTIONS[field]
        for field in ("per_method", "exempt_when", "deduct_when", "cost")
    }
    for kind in ("DEFAULT_LIMITS", "APPLICATION_LIMITS")
}
LAYERED[ConfigVars.META_LIMITS] = {ConfigVars.ON_META_BREACH: ("on_breach", breach_hook, FUNCTION)}


def layered(given: Callable[[str], Any], key: str) -> list[dict[str, Any]] | None:
    """Our limits for Flask-Limiter's setting of limits ``key`` and the settings of their options."""
    shared = Limit("").options()
    for option, (name, how, takes) in LAYERED[key].items():
        if given(option) is not None:
            shared[name] = read(option, given(option), how, takes)
    return read(key, given(key), lambda value: limits_of(key, value, shared), LIMITS)


def limits_of(key: str, value: Any, shared: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Our limits for a Flask-Limiter list: its strings as one, each function a dynamic one, each Limit(...) its own."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) or callable(value) else list(value)
    base = APPLICATION_SCOPE if key == ConfigVars.APPLICATION_LIMITS else None
    found: list[dict[str, Any]] = []
    strings: list[str] = []
    for item in items:
        if isinstance(item, Limit):
            options = item.options(base) if callable(item.limit_provider) else item.options()
            inherited = shared if key == ConfigVars.META_LIMITS else {}
            found.append({"limit": item.spec(), **inherited, **options})
        elif isinstance(item, str):
            strings.append(item)
        elif callable(item):
            made = Dynamic(item)
            apart = {} if key == ConfigVars.META_LIMITS else {"scope": Apart(made, base)}  # meta limits have theirs
            found.append({"limit": made, **shared, **apart})
        else:
            raise TypeError(f"{item!r} is none of these")
    if joined := translate(";".join(strings)):
        found.insert(0, {"limit": joined, **shared})
    return found or None


def storage_url(uri: str) -> str:
    """The ``limits`` library's storage URL as ours."""
    if not isinstance(uri, str):
        raise TypeError(f"{uri!r} is not a string")
    scheme, sep, rest = uri.partition("://")
    if scheme.startswith("async+") or scheme.split("+")[0] in ("memcached", "mongodb", "etcd", "valkey"):
        raise unsupported(ConfigVars.STORAGE_URI, uri, "a Redis URL or memory://: the only storages here")
    return f"{SCHEMES.get(scheme, scheme)}{sep}{rest}"
