"""Redis clients built from ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS``.

* ``memory://``: fakeredis, in this process;
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
the app from starting. This module imports Redis but not Flask.
"""

from __future__ import annotations

import inspect
import logging
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

from .errors import ConfigurationError

__all__ = ["DEFAULT_CLIENT_OPTIONS", "SCHEMES", "LazyClient", "client_from_url", "embedded_client", "redact"]

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
SCHEMES = ("memory", "redis", "rediss", "unix", "redis+cluster", "redis+sentinel")


def _parameters(function: Any) -> frozenset[str]:
    return frozenset(inspect.signature(function).parameters) - {"self", "kwargs"}


_REDIS_OPTIONS = _parameters(redis.Redis.__init__)
_OPTIONS = {
    "memory": _REDIS_OPTIONS,  # checked, then unused
    "redis": _REDIS_OPTIONS,
    "rediss": _REDIS_OPTIONS,
    "unix": _REDIS_OPTIONS,
    "redis+cluster": _REDIS_OPTIONS | _parameters(RedisCluster.__init__),
    "redis+sentinel": _REDIS_OPTIONS | {"sentinel_kwargs", "min_other_sentinels"},
}


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if not sep or "@" not in netloc:
        return url
    userinfo, host = netloc.rsplit("@", 1)
    user, colon, _password = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}{slash}{path}"


def client_from_url(url: str, options: Mapping[str, Any] | None = None) -> Any:
    """A client for ``url``: :class:`redis.Redis`, a fakeredis one for
    ``memory://``, or :class:`~redis.cluster.RedisCluster`.

    :raises ConfigurationError: for an unknown scheme, a malformed URL or an
        unknown client option.
    """
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            "RATELIMIT_STORAGE_URL", url, f"a URL starting {', '.join(s + '://' for s in SCHEMES)}"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - _OPTIONS[scheme])
    if unknown:
        raise ConfigurationError(
            "RATELIMIT_STORAGE_OPTIONS",
            options,
            f"keyword arguments of the {scheme} client; unknown: {', '.join(unknown)}",
        )
    if scheme == "memory":
        return embedded_client()
    options = {**DEFAULT_CLIENT_OPTIONS, **options}
    try:
        if scheme == "redis+cluster":
            return _cluster(url, options)
        if scheme == "redis+sentinel":
            return _sentinel(url, options)
        return redis.Redis.from_url(url, **options)
    except (ValueError, TypeError, IndexError) as error:
        message = str(error).replace(url, redact(url))
        raise ConfigurationError(
            "RATELIMIT_STORAGE_URL", redact(url), f"a valid {scheme}:// URL ({message})"
        ) from error


def embedded_client(warn: bool = True) -> Any:
    """A fakeredis client on a server of its own, in this process.

    :param warn: log that counts are per process (not for a fallback store,
        which is per process on purpose).
    """
    import fakeredis

    if warn:
        logger.warning(
            "flask-redis-throttle is using the embedded memory:// store: counts are kept per "
            "process, so each worker process limits on its own. Set RATELIMIT_STORAGE_URL "
            "to a Redis URL in production."
        )
    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


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
    credentials, hosts, path = _hosts(url)
    if path.strip("/") not in ("", "0"):
        raise ValueError("a cluster has only database 0")
    nodes = [ClusterNode(host, port) for host, port in hosts]  # type: ignore[no-untyped-call]
    # RedisCluster asks a start-up node for the slot map as soon as it is
    # made; an app must start while its cluster is down, so wait for a call.
    return LazyClient(lambda: RedisCluster(startup_nodes=nodes, **{**credentials, **options}))


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
