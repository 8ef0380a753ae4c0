"""Checking ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS`` for what redis-py would take without a word and
fail on at the first command; and :func:`redact`, which keeps passwords out of messages."""

from __future__ import annotations

import inspect
import math
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import redis
from redis.retry import Retry

from ..checks import is_integer, is_number
from ..errors import ConfigurationError

#: The highest database number a URL may name: a ``/99`` is far more often a typo than a
#: server with a hundred databases (Redis has 16). The ``db`` option reaches beyond, on purpose.
MAX_URL_DB = 15
_DBS = f"from 0 to {MAX_URL_DB}"


def parameters(function: Any) -> frozenset[str]:
    return frozenset(inspect.signature(function).parameters) - {"self", "kwargs"}


REDIS_OPTIONS = parameters(redis.Redis.__init__)


@dataclass(frozen=True)
class Scheme:
    """A storage URL scheme, one row of ``clients.SCHEMES``. ``shape`` says, given the split URL and
    the options redis-py read from it, what the URL should be, or None if it is."""

    name: str
    options: frozenset[str]
    build: Callable[[str, dict[str, Any], str | None], Any]
    shape: Callable[[SplitResult, Mapping[str, Any]], str | None] | None = None
    redis_url: bool = False
    hosts: bool = False
    cluster: bool = False


def redact(url: str) -> str:
    """``url`` with its passwords (before ``@``, and a ``password=`` in the query) replaced by ``***``."""
    url = re.sub(r"([?&]password=)[^&#]*", r"\1***", url)
    return re.sub(r"^([^:/]+://[^:/]*):[^/]*@", r"\1:***@", url)


def bad_url(url: str, expected: str) -> ConfigurationError:
    """The error for a bad ``RATELIMIT_STORAGE_URL``, quoting it without its password."""
    return ConfigurationError("RATELIMIT_STORAGE_URL", redact(url), expected)


def redacted_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with any password replaced by ``***``, for messages."""
    return {name: "***" if "password" in name else value for name, value in options.items()}


def check_options(scheme: Scheme, options: Mapping[str, Any]) -> None:
    """Check the names and values of ``RATELIMIT_STORAGE_OPTIONS``, and of its ``sentinel_kwargs``."""
    _check(options, scheme.options, f"keyword arguments of the {scheme.name} client", lambda quoted: quoted)
    if options.get("sentinel_kwargs") is not None:
        expected = "sentinel_kwargs to be keyword arguments of redis.Redis"
        _check(options["sentinel_kwargs"], REDIS_OPTIONS, expected, lambda quoted: {"sentinel_kwargs": quoted})


def _check(options: object, known: frozenset[str], expected: str, quote: Callable[[object], object]) -> None:
    """:param quote: what the error quotes, given the bad part of ``options``."""
    bad: tuple[object, str] | None
    if not isinstance(options, Mapping):
        bad = options, f"{expected}, in a dict"
    elif unknown := sorted(set(options) - known):
        bad = redacted_options({name: options[name] for name in unknown}), f"{expected}; unknown: {', '.join(unknown)}"
    else:
        wrong = _bad_value(options)
        bad = wrong and ({wrong[0]: wrong[1]}, f"{wrong[0]} to be {wrong[2]}")
    if bad:
        raise ConfigurationError("RATELIMIT_STORAGE_OPTIONS", quote(bad[0]), bad[1])


def _bad_value(options: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """The first option :data:`_VALUE_CHECKS` rejects: its name, its value and what it should be."""
    checks = ((name, value, _VALUE_CHECKS.get(name)) for name, value in options.items())
    return next(((name, value, check[1]) for name, value, check in checks if check and not check[0](value)), None)


def check_url(scheme: Scheme, url: str) -> None:
    """Check what redis-py would take from ``url`` without a word: a query parameter no
    connection takes or a bad value of one, a path not a database, a database Redis lacks."""
    parts = urlsplit(url)
    pool, kwargs = None, {}
    try:
        if scheme.redis_url:
            pool = redis.ConnectionPool.from_url(url)
            kwargs = pool.connection_kwargs
        elif scheme.hosts:
            parse_hosts(url)
    except ValueError as error:
        raise bad_url(url, f"a valid {scheme.name}:// URL ({error})") from error
    db, bad = kwargs.get("db", 0), _bad_value(kwargs)
    for expected in (
        scheme.hosts and parts.query
        and f"no query ({parts.query!r}) in a {scheme.name}:// URL: put options in RATELIMIT_STORAGE_OPTIONS",
        scheme.shape and scheme.shape(parts, kwargs),
        not _url_db(db) and f"a database number {_DBS}, not {db}",
        bad and f"{bad[0]} to be {bad[2]}, not {bad[1]!r}",
    ):  # fmt: skip
        if expected:
            raise bad_url(url, str(expected))
    try:
        if pool:
            try_connection(pool)
    except (TypeError, ValueError, redis.RedisError) as error:
        raise bad_url(url, f"query parameters a connection takes ({error})") from error


def _url_db(database: str | int) -> bool:
    return str(database).isdigit() and int(database) <= MAX_URL_DB


def memory_shape(parts: SplitResult, kwargs: Mapping[str, Any]) -> str | None:
    wrong = parts.path.strip("/") or parts.query or parts.fragment
    return "memory:// or memory://name, with no path or query" if wrong else None


def local_shape(parts: SplitResult, kwargs: Mapping[str, Any]) -> str | None:
    wrong = parts.netloc or parts.query or parts.fragment
    return "local:// or local:///absolute/folder, with no host or query" if wrong else None


def redis_shape(parts: SplitResult, kwargs: Mapping[str, Any]) -> str | None:
    path = parts.path.strip("/")
    wrong = path and (not path.isdigit() or "db" not in kwargs)
    return f"a path of a database number {_DBS}, not {parts.path!r}" if wrong else None


def cluster_shape(parts: SplitResult, kwargs: Mapping[str, Any]) -> str | None:
    path = parts.path.strip("/")
    return None if path in ("", "0") else f"no database but 0: a cluster has only database 0, not {path!r}"


def sentinel_shape(parts: SplitResult, kwargs: Mapping[str, Any]) -> str | None:
    service, _, database = parts.path.strip("/").partition("/")
    if not service:
        return "a valid redis+sentinel:// URL: the path must name the service (host:port/service)"
    wrong = database and not _url_db(database)
    return f"a path of service/database, the database {_DBS}, not {database!r}" if wrong else None


_TIMEOUT = (lambda v: v is None or (is_number(v) and 0 < v < math.inf), "None or a number of seconds above 0")
_COUNT = (lambda v: is_integer(v) and v >= 0, "an integer of 0 or more")
_FLAG = (lambda v: isinstance(v, bool), "True or False")

#: Options whose bad values redis-py takes without a word (to fail at the first command, never use
#: ``ssl_cert_reqs`` without TLS, read ``ssl="false"`` as true): a test and what it expects.
_VALUE_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "socket_timeout": _TIMEOUT,
    "socket_connect_timeout": _TIMEOUT,
    "retry": (lambda v: v is None or isinstance(v, Retry), "None or a redis.retry.Retry"),
    "retry_on_error": (
        lambda v: isinstance(v, (list, tuple)) and all(isinstance(e, type) and issubclass(e, BaseException) for e in v),
        "a list of exception classes",
    ),
    "health_check_interval": (lambda v: is_number(v) and 0 <= v < math.inf, "a number of seconds, 0 or more"),
    "max_connections": (lambda v: v is None or (is_integer(v) and v >= 1), "None or an integer of 1 or more"),
    "db": _COUNT,
    "min_other_sentinels": _COUNT,
    "ssl_cert_reqs": (
        lambda v: v is None or isinstance(v, ssl.VerifyMode) or v in ("none", "optional", "required"),
        "None, 'none', 'optional', 'required' or an ssl.VerifyMode",
    ),
    # One connection shared by every request, opened when the client is made.
    "single_connection_client": (lambda v: v is False, "False: requests need a pool of connections"),
    **dict.fromkeys(("ssl", "socket_keepalive", "retry_on_timeout", "decode_responses"), _FLAG),
}


def try_connection(pool: Any) -> None:
    """Make one connection of ``pool``, unconnected, and drop it."""
    pool.connection_class(**pool.connection_kwargs)


def parse_hosts(url: str) -> tuple[dict[str, Any], list[tuple[str, int]], str]:
    """Credentials, ``host:port`` pairs and path of a URL with several hosts."""
    parts = urlsplit(url)
    user, password = parts.username, parts.password
    credentials = {name: unquote(value) for name, value in (("username", user), ("password", password)) if value}
    hosts = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    return credentials, hosts, parts.path
