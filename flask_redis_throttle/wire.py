"""The lean client path: one script call as one send and one parse, on a
connection taken from redis-py's own pool.

redis-py's command path spends more CPU per call than the loopback round
trip it waits for: it packs every argument anew, wraps the call in its
retry and metrics layers and parses the reply through its generic parser.
A rate limiter sends the same command shape on every request, so this
module sends it as pre-encoded bytes instead:

* the ``EVALSHA <sha> <numkeys>`` head is encoded once per script and arity;
* each key and argument is encoded once and kept in a bounded LRU, since the
  same identities' keys and the same plan's arguments come back request
  after request;
* the connection comes from, and goes back to, the client's pool through
  ``get_connection``/``release``, so redis-py still connects, authenticates,
  speaks TLS, follows Sentinel, checks the connection before use and starts
  a fresh pool in a forked child;
* the reply is parsed by a hiredis reader kept on the connection, or by
  redis-py's own parser when hiredis is not installed.

What cannot be done here is handed back to redis-py's normal path, which
keeps its reconnect and :class:`~redis.retry.Retry` handling: see
:class:`Replay`. A client this path does not fit (RESP3, a single-connection
client, a connection class of its own, the embedded ``memory://`` store) never takes it: see
:func:`lean_client`.

This module imports Redis, and needs no Flask app.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress
from functools import lru_cache
from typing import Any

import redis
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)
from redis.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

from .codec import hash_tag
from .local import LocalConnection

hiredis: Any
try:  # pragma: no cover - which branch runs depends on the install
    import hiredis
except ImportError:  # pragma: no cover
    hiredis = None

__all__ = ["KEY_CACHE_SIZE", "STORAGE_ERRORS", "LeanClient", "LeanCluster", "Replay", "lean_client"]

#: What a client raises when Redis cannot answer: redis-py's errors, and the
#: cluster client's own, which does not derive from them.
STORAGE_ERRORS = (redis.RedisError, RedisClusterException)

#: How many encoded keys and arguments are kept (each, and each request's
#: keys and arguments together): enough for the identities of a busy minute,
#: bounded so that a flood of new identities cannot grow the process.
KEY_CACHE_SIZE = 8192

#: The connection classes whose socket and parser this path knows: redis-py's
#: own, over TCP, TLS, a Unix socket, and to a Sentinel's master, and
#: ``local://``'s, which only connects differently. Exact classes only: a
#: subclass may change how commands are sent.
CONNECTIONS: frozenset[type] = frozenset(
    {
        Connection,
        SSLConnection,
        UnixDomainSocketConnection,
        SentinelManagedConnection,
        SentinelManagedSSLConnection,
        LocalConnection,
    }
)

#: The attribute, on a redis-py connection, of its hiredis reader for this path.
_READER = "_flask_redis_throttle_reader"

_RECV_SIZE = 65536


class Replay(redis.ConnectionError):
    """The lean call failed where redis-py's own :class:`~redis.retry.Retry`
    would try again, so the caller should make the call again through
    redis-py's normal path (the failed connection was disconnected); or,
    on a cluster, the lean path does not fit the client and sent nothing.

    Only connection errors are replayed, never a timeout: a timed-out script
    may have run, and running it again would count the request twice.
    """


def lean_client(client: Any) -> LeanClient | None:
    """The lean path for ``client``, or None when it does not fit it.

    It fits a :class:`redis.Redis` on a pool of one of redis-py's own
    connection classes (:data:`CONNECTIONS`) speaking RESP2. A cluster, a
    RESP3 client, a single-connection client, the embedded store and custom
    connection classes stay on redis-py's normal path.
    """
    if not isinstance(client, redis.Redis) or getattr(client, "connection", None) is not None:
        return None
    pool = getattr(client, "connection_pool", None)
    return LeanClient(pool) if _pool_fits(pool) else None


@lru_cache(maxsize=KEY_CACHE_SIZE)
def _bulk(value: str | int | float | bytes) -> bytes:
    """``value`` as a RESP bulk string, encoded as redis-py's encoder would."""
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        data = value.encode()
    elif isinstance(value, bool):
        raise redis.DataError(f"Invalid input of type: 'bool' ({value!r}): convert it to a number or a string first")
    elif isinstance(value, int):
        data = str(value).encode()
    else:
        data = repr(value).encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


@lru_cache(maxsize=KEY_CACHE_SIZE)
def _bulks(values: tuple[Any, ...], types: tuple[type, ...]) -> bytes:
    """``values`` as RESP bulk strings, one after the other: an identity's
    keys, or a plan's arguments. ``types`` is part of the cache key, since
    ``1``, ``1.0`` and ``True`` are equal but not encoded alike."""
    return b"".join(map(_bulk, values))


@lru_cache(maxsize=256)
def _head(sha: str, keys: int, args: int) -> bytes:
    """``EVALSHA sha numkeys``, with the count of the whole command."""
    return b"*%d\r\n$7\r\nEVALSHA\r\n%b%b" % (3 + keys + args, _bulk(sha), _bulk(keys))


def pack_evalsha(sha: str, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """The RESP bytes of ``EVALSHA sha len(keys) *keys *args``."""
    keys, args = tuple(keys), tuple(args)
    # Keys are strings, which equal no value of another type: no types needed.
    return b"".join((_head(sha, len(keys), len(args)), _bulks(keys, ()), _bulks(args, tuple(map(type, args)))))


class LeanClient:
    """Script calls as one send and one parse on a pooled connection.

    :param pool: the :class:`redis.ConnectionPool` of the client.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        #: Whether replies are parsed here by hiredis; without it, by the
        #: connection's own parser (redis-py's pure-Python one).
        self.hiredis = hiredis is not None

    def evalsha(self, sha: str, keys: Any, args: Any) -> Any:
        """Run the script ``sha`` once and return its reply.

        :raises Replay: when the call failed on a connection error that
            redis-py's own retry would retry; the caller makes it again
            through the normal path.
        :raises redis.RedisError: any other error, as redis-py would raise
            it (a :class:`~redis.exceptions.NoScriptError` included: the
            connection stays usable).
        """
        command = pack_evalsha(sha, keys, args)
        pool = self.pool
        # A connection that cannot be had was sent nothing; redis-py's own
        # path does not retry this either.
        conn = pool.get_connection()
        try:
            conn.send_packed_command([command])
            reply = self._read(conn) if self.hiredis else conn.read_response()
        except redis.ConnectionError as error:
            conn.disconnect()
            if _retried(conn, error):
                raise Replay(str(error)) from error
            raise
        except BaseException:
            # A half-read reply would be read by the next command.
            conn.disconnect()
            raise
        finally:
            pool.release(conn)
        return reply

    def _read(self, conn: Any) -> Any:
        """Read one reply with the connection's hiredis reader."""
        reply = _read_reply(conn)
        if isinstance(reply, hiredis.ReplyError):
            raise self._error(conn, str(reply))
        return reply

    @staticmethod
    def _error(conn: Any, message: str) -> redis.RedisError:
        """The exception redis-py raises for the error reply ``message``.

        A master that has become a replica answers READONLY: the connection
        to a Sentinel's master is dropped and the error is a connection
        error, so the call is replayed on the new master, as redis-py does.
        """
        error: redis.RedisError = conn._parser.parse_error(message)
        sentinel = isinstance(conn, SentinelManagedConnection)
        if isinstance(error, ReadOnlyError) and sentinel and conn.connection_pool.is_master:
            conn.disconnect()
            return redis.ConnectionError("The previous master is now a slave")
        return error


def _retried(conn: Any, error: Exception) -> bool:
    """Whether redis-py's command path would try ``error`` again on ``conn``."""
    retry = getattr(conn, "retry", None)
    if retry is None or isinstance(error, redis.TimeoutError):
        return False
    return isinstance(error, retry._supported_errors) and retry.get_retries() != 0


def _where(conn: Any) -> str:
    try:
        return str(conn._host_error())
    except Exception:  # pragma: no cover - only for the message
        return "the server"


def _read_reply(conn: Any) -> Any:
    """Read one reply with the connection's hiredis reader; an error reply
    is returned as a :class:`hiredis.ReplyError`, not raised.

    :raises redis.TimeoutError: when the socket timed out.
    :raises redis.ConnectionError: when the connection failed or was closed.
    """
    reader = conn.__dict__.get(_READER)
    if reader is None:
        reader = hiredis.Reader()
        setattr(conn, _READER, reader)
    sock = conn._sock
    try:
        reply = reader.gets()
        while reply is False:
            data = sock.recv(_RECV_SIZE)
            if not data:
                raise redis.ConnectionError("Connection closed by server.")
            reader.feed(data)
            reply = reader.gets()
    except TimeoutError:  # socket.timeout
        _drop(conn)
        raise redis.TimeoutError(f"Timeout reading from {_where(conn)}") from None
    except OSError as error:
        _drop(conn)
        raise redis.ConnectionError(f"Error while reading from {_where(conn)} : {error.args}") from error
    except BaseException:
        _drop(conn)
        raise
    if conn.health_check_interval:
        conn.next_health_check = time.monotonic() + conn.health_check_interval
    return reply


def _drop(conn: Any) -> None:
    """Forget the reader of a connection whose reply was not read whole."""
    conn.__dict__.pop(_READER, None)


# -- Redis Cluster -------------------------------------------------------------

#: One script call: its keys and its arguments (as in :mod:`~flask_redis_throttle.storage`).
Call = tuple[Sequence[str], Sequence[Any]]

#: Error replies that say the node did not run the command, and that
#: redis-py's cluster client knows how to follow: a redirect (MOVED, ASK), a
#: slot in the middle of a migration (TRYAGAIN), a cluster or master that is
#: down for now (CLUSTERDOWN, MASTERDOWN), a node loading its data (LOADING).
_NOT_RUN = (AskError, TryAgainError, ClusterDownError, BusyLoadingError)


@lru_cache(maxsize=KEY_CACHE_SIZE)
def _tag_slot(tag: str) -> int:
    return int(key_slot(tag.encode()))


@lru_cache(maxsize=KEY_CACHE_SIZE)
def key_slot_of(key: str) -> int:
    """The cluster slot of ``key``: worked out once per hash tag (an
    identity's keys all share one), and kept, like each key's, in a bounded
    LRU, so that a returning identity's keys cost one lookup each."""
    return _tag_slot(hash_tag(key))


class LeanCluster:
    """Script calls to a Redis Cluster as one send per node and one parse per
    call, on connections taken from redis-py's per-node pools.

    Each call's node comes from redis-py's own slot map
    (``client.nodes_manager.slots_cache``), read on every request, so a map
    that redis-py refreshes (after a MOVED it followed, a failed node, a
    failover) is the one the next request uses. The calls for every node
    involved are written before any reply is read, so that the round trips
    overlap, as in redis-py's cluster pipeline.

    A call is handed to redis-py's cluster client, aimed at the node it was
    meant for, only when that node certainly did not run it: no connection
    could be had, the send failed, or the node answered with an error that
    means it did not run the command (:data:`_NOT_RUN`: MOVED, ASK,
    TRYAGAIN, CLUSTERDOWN, LOADING). redis-py then reconnects, follows the
    redirect and refreshes its slot map. A timeout or a lost connection
    after the send is never replayed, since the script may have run: the
    call fails, and the slot map is refreshed as redis-py would.

    :param client: a :class:`redis.cluster.RedisCluster`, or a stand-in that
        builds one on first use (see :class:`~flask_redis_throttle.clients.LazyClient`).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        #: Whether this path fits the cluster's node connections (see
        #: :func:`lean_client`); None until the cluster client exists.
        self._fits: bool | None = None
        #: The cluster client's ``nodes_manager``, which keeps the slot map.
        self._manager: Any = None

    def fits(self) -> bool:
        """Whether the node clients are ones this path can speak for: redis-py's
        own connection classes, RESP2, no client-side cache, and hiredis.

        :raises redis.RedisError: when the cluster client cannot be built.
        """
        if self._fits is None:
            manager = self._manager = getattr(self.client, "nodes_manager", None)
            nodes = list(getattr(manager, "nodes_cache", {}).values())
            self._fits = (
                hiredis is not None
                and bool(nodes)
                and _pool_fits(self.client.get_redis_connection(nodes[0]).connection_pool)
            )
        return self._fits

    def nodes_of(self, keys: Sequence[str]) -> list[str]:
        """The nodes (``host:port``) that serve ``keys`` in redis-py's slot
        map, each once, in the keys' order; ``""`` for keys no node serves.
        Nothing is sent. Call :meth:`fits` first."""
        slots = self._manager.slots_cache
        names: dict[str, None] = {}
        for key in keys:
            owners = slots.get(key_slot_of(key))
            names[owners[0].name if owners else ""] = None
        return list(names)

    def evalsha(self, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script ``sha`` once on the node of ``keys``; return its
        reply or raise its error, as redis-py's ``evalsha`` would.

        :raises Replay: when this path does not fit the cluster's clients,
            so the call is to be made through redis-py's normal path.
        """
        if not self.fits():
            raise Replay("the lean path does not fit this cluster client")
        results, _ = self.run("EVALSHA", sha, [(keys, args)])
        if isinstance(results[0], Exception):
            raise results[0]
        return results[0]

    def run(self, command: str, script: str, calls: Sequence[Call]) -> tuple[list[Any], list[str]]:
        """Send ``command`` (EVALSHA with a script's SHA, or EVAL with its
        source) once per call; each call's keys must share one slot.

        :returns: each call's reply or exception, and the node (``host:port``)
            each call was sent to (``""`` when its slot has no node in the
            map; redis-py was then asked to find one).
        """
        slots = self._manager.slots_cache
        replies: list[Any] = [None] * len(calls)
        names = [""] * len(calls)
        groups: dict[str, tuple[Any, list[int]]] = {}
        handover: list[tuple[int, Any]] = []
        for i, (keys, _) in enumerate(calls):
            owners = slots.get(key_slot_of(keys[0]))
            if not owners:
                handover.append((i, None))
                continue
            node = owners[0]
            names[i] = node.name
            group = groups.get(node.name)
            if group is None:
                groups[node.name] = (node, [i])
            else:
                group[1].append(i)
        # Everything is encoded before anything is sent: a value that cannot
        # be encoded fails the request before any node counts it.
        payloads = {name: [_pack(command, script, *calls[i]) for i in indices] for name, (_, indices) in groups.items()}
        sent: list[tuple[Any, Any, Any, list[int]]] = []
        try:
            for name, (node, indices) in groups.items():
                pool = (node.redis_connection or self.client.get_redis_connection(node)).connection_pool
                try:
                    # A connection that cannot be had, or a send that
                    # failed, leaves the node without the whole command.
                    conn = pool.get_connection()
                except redis.TimeoutError as error:
                    # A node that does not answer its handshake in time
                    # would make redis-py wait as long again: it fails here.
                    self._node_failed(node, refresh=False)
                    for i in indices:
                        replies[i] = error
                    continue
                except redis.ConnectionError:
                    handover += [(i, node) for i in indices]
                    continue
                try:
                    conn.send_packed_command(payloads[name])
                except (redis.ConnectionError, redis.TimeoutError):
                    pool.release(conn)  # send_packed_command disconnected it
                    handover += [(i, node) for i in indices]
                    continue
                except BaseException:
                    conn.disconnect()
                    pool.release(conn)
                    raise
                sent.append((node, pool, conn, indices))
            while sent:
                node, pool, conn, indices = sent[0]
                self._read_node(node, conn, indices, replies, handover)
                del sent[0]
                pool.release(conn)
        finally:
            for _, pool, conn, _ in sent:
                # Written to but not read whole: its replies would be read
                # by the next command on it.
                conn.disconnect()
                _drop(conn)
                pool.release(conn)
        for i, target in handover:
            replies[i] = self._redis_py(command, script, calls[i], target)
        return replies, names

    def _read_node(self, node: Any, conn: Any, indices: list[int], replies: list[Any], handover: list[Any]) -> None:
        """Read the replies of ``indices``' calls from ``conn``, in order."""
        for n, i in enumerate(indices):
            try:
                reply = _read_reply(conn)
            except (redis.ConnectionError, redis.TimeoutError) as error:
                # Sent, and perhaps run: never replayed.
                conn.disconnect()
                self._node_failed(node, refresh=not isinstance(error, redis.TimeoutError))
                for j in indices[n:]:
                    replies[j] = error
                return
            if isinstance(reply, hiredis.ReplyError):
                reply = conn._parser.parse_error(str(reply))
                if isinstance(reply, _NOT_RUN):
                    handover.append((i, node))
                    continue
            replies[i] = reply

    def _node_failed(self, node: Any, refresh: bool) -> None:
        """What redis-py's cluster client does when a node's connection fails
        or times out: drop the node's idle connections, try it last, and,
        with ``refresh``, refresh the slot map (which finds a promoted
        replica). A node that timed out is not refreshed from: the refresh
        may ask that very node, and the request would wait a second
        timeout for it (a dead node's next request refreshes the map)."""
        manager = self.client.nodes_manager
        pool = getattr(node.redis_connection, "connection_pool", None)
        if pool is not None:
            with pool._lock:
                pool.update_active_connections_for_reconnect()
                pool.disconnect_free_connections()
        manager.move_node_to_end_of_cached_nodes(node.name)
        if refresh:
            # When no node answers, the next request's call fails on its own.
            with suppress(*STORAGE_ERRORS):
                manager.initialize(last_failed_node_name=node.name)

    def _redis_py(self, command: str, script: str, call: Call, node: Any) -> Any:
        """Make a call that did not run through redis-py's cluster client:
        aimed at ``node``, so that redis-py follows a redirect from it but
        does not replay a timeout; or, when the slot has no node in the map,
        wherever redis-py finds one."""
        keys, args = call
        target = {} if node is None else {"target_nodes": node}
        try:
            return self.client.execute_command(command, script, len(keys), *keys, *args, **target)
        except STORAGE_ERRORS as error:
            return error


def _pack(command: str, script: str, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """The RESP bytes of ``command script len(keys) *keys *args``, for
    EVALSHA (pre-encoded: see :func:`pack_evalsha`) or EVAL (rare: only
    after NOSCRIPT)."""
    if command == "EVALSHA":
        return pack_evalsha(script, keys, args)
    keys, args = tuple(keys), tuple(args)
    head = b"*%d\r\n%b%b%b" % (3 + len(keys) + len(args), _bulk(command), _bulk(script), _bulk(len(keys)))
    return b"".join((head, _bulks(keys, ()), _bulks(args, tuple(map(type, args)))))


def _pool_fits(pool: Any) -> bool:
    """Whether this module can speak on ``pool``'s connections: see :func:`lean_client`."""
    return (
        isinstance(pool, redis.ConnectionPool)
        and pool.connection_class in CONNECTIONS
        and str(pool.connection_kwargs.get("protocol") or 2) == "2"
        and getattr(pool, "cache", None) is None
    )
