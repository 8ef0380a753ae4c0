"""Checking ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS``
before any client is built: the scheme, the URL's parts, which options each
kind of client takes, and the values of those redis-py would take without a
word and fail on at the first command. And :func:`redact`, which keeps a
password out of every message.
"""

from __future__ import annotations

import inspect
import math
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import RedisCluster
from redis.retry import Retry

from ..checks import is_integer, is_number
from ..errors import ConfigurationError

__all__ = [
    "MAX_URL_DB",
    "REDIS_OPTIONS",
    "SCHEMES",
    "bad_url",
    "check_options",
    "check_url",
    "parse_hosts",
    "redact",
    "redacted_options",
    "try_connection",
]

#: The URL schemes ``RATELIMIT_STORAGE_URL`` accepts.
SCHEMES = ("memory", "local", "redis", "rediss", "unix", "redis+cluster", "redis+sentinel")

#: The highest database number a URL may name. Redis has 16 databases (0 to
#: 15) unless its ``databases`` setting says more, and a server answers any
#: command on a database it lacks with an error: a ``/99`` is far more often
#: a typo than a server with a hundred databases. The ``db`` option of
#: ``RATELIMIT_STORAGE_OPTIONS`` reaches beyond, on purpose.
MAX_URL_DB = 15


def _parameters(function: Any) -> frozenset[str]:
    return frozenset(inspect.signature(function).parameters) - {"self", "kwargs"}


REDIS_OPTIONS = _parameters(redis.Redis.__init__)
_OPTIONS = {
    "memory": REDIS_OPTIONS,  # checked, then unused
    # Where the server is, and how it is spoken to, is local://'s own business.
    "local": REDIS_OPTIONS - {"host", "port", "unix_socket_path", "connection_pool", "ssl"},
    "redis": REDIS_OPTIONS,
    "rediss": REDIS_OPTIONS,
    "unix": REDIS_OPTIONS,
    "redis+cluster": REDIS_OPTIONS | _parameters(RedisCluster.__init__),
    "redis+sentinel": REDIS_OPTIONS | {"sentinel_kwargs", "min_other_sentinels"},
}


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``, for messages and
    logs: the one before ``@`` and a ``password=`` in the query."""
    url = re.sub(r"([?&]password=)[^&#]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if not sep or "@" not in netloc:
        return url
    userinfo, host = netloc.rsplit("@", 1)
    user, colon, _password = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}{slash}{path}"


def bad_url(url: str, expected: str) -> ConfigurationError:
    """The error for a bad ``RATELIMIT_STORAGE_URL``, quoting it without its password."""
    return ConfigurationError("RATELIMIT_STORAGE_URL", redact(url), expected)


def redacted_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with any password replaced by ``***``, for messages."""
    return {name: "***" if "password" in name else value for name, value in options.items()}


def check_options(scheme: str, options: Mapping[str, Any]) -> None:
    """Check the names and values of ``RATELIMIT_STORAGE_OPTIONS``, and of its
    ``sentinel_kwargs``.

    :raises ConfigurationError: quoting the unknown names, or the bad value.
    """
    _check_options(options, _OPTIONS[scheme], f"keyword arguments of the {scheme} client", lambda quoted: quoted)
    sentinel_kwargs = options.get("sentinel_kwargs")
    if sentinel_kwargs is not None:
        _check_options(
            sentinel_kwargs,
            REDIS_OPTIONS,
            "sentinel_kwargs to be keyword arguments of redis.Redis",
            lambda quoted: {"sentinel_kwargs": quoted},
        )


def _check_options(options: object, known: frozenset[str], expected: str, quote: Callable[[object], object]) -> None:
    """Check that ``options`` is a dict of ``known`` names, each with a value
    :data:`_VALUE_CHECKS` takes.

    :param quote: what the error quotes, given the bad part of ``options``.
    """
    if not isinstance(options, Mapping):
        raise ConfigurationError("RATELIMIT_STORAGE_OPTIONS", quote(options), f"{expected}, in a dict")
    unknown = sorted(set(options) - known)
    if unknown:
        quoted = redacted_options({name: options[name] for name in unknown})
        raise ConfigurationError(
            "RATELIMIT_STORAGE_OPTIONS", quote(quoted), f"{expected}; unknown: {', '.join(unknown)}"
        )
    bad = _bad_value(options)
    if bad is not None:
        name, value, what = bad
        raise ConfigurationError("RATELIMIT_STORAGE_OPTIONS", quote({name: value}), f"{name} to be {what}")


def _bad_value(options: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """The first option :data:`_VALUE_CHECKS` rejects: its name, its value
    and what it should be; None if there is none."""
    for name, value in options.items():
        check = _VALUE_CHECKS.get(name)
        if check is not None and not check[0](value):
            return name, value, check[1]
    return None


def check_url(scheme: str, url: str) -> None:
    """Check what redis-py would take from ``url`` without a word: a query
    parameter no connection takes, a bad value of one it takes, a path that
    is not a database, a database Redis lacks.

    :raises ConfigurationError: quoting ``url`` without its password.
    """
    parts = urlsplit(url)
    if scheme == "memory":
        # A name, as in memory://dev, is a label; a path or a query would
        # name a database or options that the embedded store does not have.
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise bad_url(url, f"memory:// or memory://name, with no path or query, not {url!r}")
        return
    if scheme in ("redis+cluster", "redis+sentinel"):
        _check_hosts_url(scheme, url)
        return
    if scheme == "local":
        # A host would name another machine; the folder is the path.
        if parts.netloc or parts.query or parts.fragment:
            raise bad_url(url, f"local:// or local:///absolute/folder, with no host or query, not {url!r}")
        return
    try:
        pool = redis.ConnectionPool.from_url(url)
    except ValueError as error:
        raise bad_url(url, f"a valid {scheme}:// URL ({error})") from error
    if scheme != "unix":
        database = parts.path.strip("/")
        if database and (not database.isdigit() or "db" not in pool.connection_kwargs):
            raise bad_url(url, f"a path of a database number from 0 to {MAX_URL_DB}, not {parts.path!r}")
    db = pool.connection_kwargs.get("db", 0)
    if not 0 <= db <= MAX_URL_DB:
        raise bad_url(url, f"a database number from 0 to {MAX_URL_DB}, not {db}")
    bad = _bad_value(pool.connection_kwargs)
    if bad is not None:
        name, value, expected = bad
        raise bad_url(url, f"{name} to be {expected}, not {value!r}")
    try:
        try_connection(pool)
    except (TypeError, ValueError, redis.RedisError) as error:
        raise bad_url(url, f"query parameters a connection takes ({error})") from error


def _check_hosts_url(scheme: str, url: str) -> None:
    """Check a cluster or sentinel URL: host:port pairs, a path naming the
    database (and the service), and no query, which these URLs would ignore.

    :raises ConfigurationError: quoting ``url`` without its password.
    """
    parts = urlsplit(url)
    if parts.query:
        raise bad_url(url, f"no query ({parts.query!r}) in a {scheme}:// URL: put options in RATELIMIT_STORAGE_OPTIONS")
    try:
        parse_hosts(url)
    except ValueError as error:
        raise bad_url(url, f"a valid {scheme}:// URL ({error})") from error
    path = parts.path.strip("/")
    if scheme == "redis+cluster":
        if path not in ("", "0"):
            raise bad_url(url, f"no database but 0: a cluster has only database 0, not {path!r}")
        return
    service, _, database = path.partition("/")
    if not service:
        raise bad_url(url, "a valid redis+sentinel:// URL: the path must name the service (host:port/service)")
    if database and (not database.isdigit() or int(database) > MAX_URL_DB):
        raise bad_url(url, f"a path of service/database, the database from 0 to {MAX_URL_DB}, not {database!r}")


def _timeout(value: Any) -> bool:
    return value is None or (is_number(value) and 0 < value < math.inf)


def _count(least: int) -> Callable[[Any], bool]:
    return lambda value: is_integer(value) and value >= least


_FLAG = (lambda value: isinstance(value, bool), "True or False")
_TIMEOUT = (_timeout, "None or a number of seconds above 0")

#: The client options whose bad values redis-py takes without a word and
#: fails on at the first command (or never uses, as ``ssl_cert_reqs``
#: without TLS, or reads as true, as ``ssl="false"``): for each, its test
#: and what it expects. A connection object checks the rest when it is made.
_VALUE_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "socket_timeout": _TIMEOUT,
    "socket_connect_timeout": _TIMEOUT,
    "retry": (lambda value: value is None or isinstance(value, Retry), "None or a redis.retry.Retry"),
    "retry_on_error": (
        lambda value: (
            isinstance(value, (list, tuple))
            and all(isinstance(error, type) and issubclass(error, BaseException) for error in value)
        ),
        "a list of exception classes",
    ),
    "health_check_interval": (
        lambda value: is_number(value) and 0 <= value < math.inf,
        "a number of seconds, 0 or more",
    ),
    "max_connections": (lambda value: value is None or _count(1)(value), "None or an integer of 1 or more"),
    "db": (_count(0), "an integer of 0 or more"),
    "min_other_sentinels": (_count(0), "an integer of 0 or more"),
    "ssl_cert_reqs": (
        lambda value: value is None or isinstance(value, ssl.VerifyMode) or value in ("none", "optional", "required"),
        "None, 'none', 'optional', 'required' or an ssl.VerifyMode",
    ),
    # One connection shared by every request, opened when the client is made.
    "single_connection_client": (lambda value: value is False, "False: requests need a pool of connections"),
    **dict.fromkeys(("ssl", "socket_keepalive", "retry_on_timeout", "decode_responses"), _FLAG),
}


def try_connection(pool: Any) -> None:
    """Make one connection of ``pool``, without connecting it, and drop it."""
    pool.connection_class(**pool.connection_kwargs)


def parse_hosts(url: str) -> tuple[dict[str, Any], list[tuple[str, int]], str]:
    """Credentials, ``host:port`` pairs and path of a URL with several hosts."""
    parts = urlsplit(url)
    credentials: dict[str, Any] = {}
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        if user:
            credentials["username"] = unquote(user)
        if password:
            credentials["password"] = unquote(password)
    hosts = []
    for item in netloc.split(","):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    return credentials, hosts, parts.path
