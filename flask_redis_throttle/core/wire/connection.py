"""The lean path on one connection: a script call packed as pre-encoded
bytes, sent at once, and its reply read by a hiredis reader kept on the
connection (or by redis-py's parser without hiredis).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import redis
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import (
    ReadOnlyError,
    RedisClusterException,
)
from redis.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

from ..local import LocalConnection

hiredis: Any
try:  # pragma: no cover - which branch runs depends on the install
    import hiredis
except ImportError:  # pragma: no cover
    hiredis = None

__all__ = [
    "CONNECTIONS",
    "KEEP",
    "KEY_CACHE_SIZE",
    "STORAGE_ERRORS",
    "LeanClient",
    "Replay",
    "lean_client",
    "pack_around",
    "pack_evalsha",
    "pack_time",
]

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

#: How many connections a :class:`LeanClient` keeps between calls, at most:
#: one per thread making a call at the same time, up to a gthread worker's
#: usual count. More threads than this still share the pool's.
KEEP = 8

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
    if not args:
        return _head(sha, len(keys), 0) + _bulks(tuple(keys), ())
    before, after = pack_around(sha, keys, args)
    return before + pack_time(args[0]) + after


def pack_around(sha: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[bytes, bytes]:
    """:func:`pack_evalsha`'s bytes before its first argument, the time, and
    after it: a request's call, whose time alone changes between requests."""
    keys, rest = tuple(keys), tuple(args[1:])
    # Keys are strings, which equal no value of another type: no types needed.
    return _head(sha, len(keys), len(rest) + 1) + _bulks(keys, ()), _bulks(rest, tuple(map(type, rest)))


def pack_time(now: str | int | bytes) -> bytes:
    """The time argument of a call packed by :func:`pack_around` (``""`` for Redis's clock)."""
    return b"$0\r\n\r\n" if now == "" else _bulk(now)


class LeanClient:
    """Script calls as one send and one parse on a pooled connection.

    A connection whose call read its reply whole is kept here for the next
    call instead of going back to the pool: the pool's checkout and release
    take its lock, record metrics and poll the idle socket for stray data,
    which together cost about a third of a ``PING``. A kept connection is
    known clean (a call that failed in any way disconnects its connection
    and gives it back to the pool), so the poll could only find one that
    the server closed while it sat idle, which the call finds too.

    The pool still counts a kept connection as in use, so ``pool.disconnect()``
    (``client.close()``, the app's reset) closes it too, and ``max_connections``
    counts it. See :meth:`checkout` for how a kept connection is checked
    before it is used, and a forked child.

    :param pool: the :class:`redis.ConnectionPool` of the client.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        #: Whether replies are parsed here by hiredis; without it, by the
        #: connection's own parser (redis-py's pure-Python one).
        self.hiredis = hiredis is not None
        #: The connections kept between calls. ``list.pop`` and
        #: ``list.append`` are atomic under the GIL, so threads share it
        #: without a lock, and a connection is popped by one thread at a time.
        self._free: list[Any] = []
        #: How many are kept: at most :data:`KEEP`, and at most half the
        #: pool's ``max_connections``. A kept connection is in use in the
        #: pool's eyes, so the other half stays for redis-py's path (``EVAL``
        #: after ``NOSCRIPT``, a replay, the refusals' log) and the app's own
        #: use of a shared client, which would otherwise find a small pool
        #: taken by idle connections kept here.
        self._keep = min(KEEP, pool.max_connections // 2)
        #: A Sentinel pool's ownership check (is the connection to the
        #: current master?), which its ``release`` makes; None for a pool
        #: whose check is only the process id (see :meth:`checkout`).
        owns = type(pool).owns_connection
        self._owns = None if owns is redis.ConnectionPool.owns_connection else pool.owns_connection
        #: Whether its connections can be marked for reconnection (redis-py 6+).
        self._reconnects = hasattr(pool.connection_class, "should_reconnect")
        #: The ``Retry`` :meth:`_polls` last looked at, and what it found.
        self._retry: Any = None
        self._poll = False
        #: The process the kept connections belong to (see :meth:`checkout`).
        self._pid = os.getpid()

    def evalsha(self, sha: str, keys: Any, args: Any) -> Any:
        """Run the script ``sha`` once and return its reply: see :meth:`send`."""
        return self.send(pack_evalsha(sha, keys, args))

    def send(self, command: bytes) -> Any:
        """Send one script call, packed (see :func:`pack_evalsha`), and return its reply.

        :raises Replay: when the call failed on a connection error that
            redis-py's own retry would retry; the caller makes it again
            through the normal path.
        :raises redis.RedisError: any other error, as redis-py would raise
            it (a :class:`~redis.exceptions.NoScriptError` included).
        """
        # A connection that cannot be had was sent nothing; redis-py's own
        # path does not retry this either.
        conn = self.checkout()
        try:
            conn.send_packed_command([command])
            if self.hiredis:
                # Read here rather than in a method of its own: one call
                # fewer on every request.
                reply = _read_reply(conn)
                if isinstance(reply, hiredis.ReplyError):
                    raise self._error(conn, str(reply))
            else:
                reply = conn.read_response()
        except redis.ConnectionError as error:
            self.discard(conn)
            if _retried(conn, error):
                raise Replay(str(error)) from error
            raise
        except BaseException:
            # A half-read reply would be read by the next command.
            self.discard(conn)
            raise
        self.checkin(conn)
        return reply

    def checkout(self, poll: bool = True) -> Any:
        """A kept connection, else one from the pool; with ``poll`` False,
        a kept one is not polled here (see :meth:`_polls`): the cluster's
        path polls the connections of every node at once.

        A kept connection that ``pool.disconnect()`` closed, one the pool
        marked for reconnection (a node that moved, a failed cluster node),
        or, on a Sentinel pool, one to an address that is no longer the
        master's, is given back to the pool and one checked out instead:
        the pool's checkout connects it as redis-py does (a Sentinel
        master's asks the sentinels where the master is, which a bare
        reconnect on send would not) and drops one to a former master.

        One the server closed while it sat idle (a restart, Redis's
        ``timeout``) is found by the call's send or read, which is then
        replayed. Where redis-py's ``Retry`` would not replay it, the socket
        is polled first, as the pool's checkout does: see :meth:`_polls`.

        In a forked child, the kept connections are the parent's: a reply
        read by two processes would be read by the wrong one. The child
        forgets them (it does not close them: that would close only its
        copies of the sockets, as redis-py's own reset does), and its pool
        starts afresh too (redis-py's ``_checkpid``). The process id is
        checked on every call, as the pool's checkout checks it, rather than
        in an ``os.register_at_fork`` hook: uWSGI forks its workers without
        running those.
        """
        if self._pid != os.getpid():
            self._free, self._pid = [], os.getpid()
        try:
            conn = self._free.pop()
        except IndexError:
            return self.pool.get_connection()
        owns = self._owns
        sock = conn._sock
        if (
            sock is None
            or (owns is not None and not owns(conn))
            or (self._reconnects and conn.should_reconnect())
            or (poll and self._polls(conn) and select.select([sock], (), (), 0)[0])
        ):
            self.pool.release(conn)
            return self.pool.get_connection()
        return conn

    def _polls(self, conn: Any) -> bool:
        """Whether a kept connection is polled before use: only when a call
        that meets a closed connection would not be replayed (retries
        turned off), since the poll costs a system call on every request.
        Worked out again only when the connection's ``Retry`` changes
        (``pool.set_retry``)."""
        retry = conn.retry
        if retry is not self._retry:
            self._poll = not _retried(conn, redis.ConnectionError("closed by the server"))
            self._retry = retry
        return self._poll

    def checkin(self, conn: Any) -> None:
        """Keep ``conn``, whose reply was read whole, for the next call.

        A connection with a new token to authenticate with (a streaming
        credential provider's) goes back to the pool, whose release
        re-authenticates it. Past :attr:`_keep`, one goes back to the pool:
        threads appending at the same instant may each trim one, which only
        leaves one fewer kept.
        """
        if getattr(conn, "_re_auth_token", None) is not None:
            self.pool.release(conn)
            return
        free = self._free
        free.append(conn)
        if len(free) > self._keep:
            try:
                extra = free.pop()
            except IndexError:  # pragma: no cover - another thread took it
                return
            self.pool.release(extra)

    def discard(self, conn: Any) -> None:
        """Close a connection whose call failed and give it back to the pool."""
        conn.disconnect()
        self.pool.release(conn)

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
    except BaseException as error:
        _drop(conn)
        if isinstance(error, TimeoutError):  # socket.timeout
            raise redis.TimeoutError(f"Timeout reading from {_where(conn)}") from None
        if isinstance(error, OSError):
            raise redis.ConnectionError(f"Error while reading from {_where(conn)} : {error.args}") from error
        raise
    if conn.health_check_interval:
        conn.next_health_check = time.monotonic() + conn.health_check_interval
    return reply


def _drop(conn: Any) -> None:
    """Forget the reader of a connection whose reply was not read whole."""
    conn.__dict__.pop(_READER, None)


def _pool_fits(pool: Any) -> bool:
    """Whether this module can speak on ``pool``'s connections: see :func:`lean_client`."""
    return (
        isinstance(pool, redis.ConnectionPool)
        and pool.connection_class in CONNECTIONS
        and str(pool.connection_kwargs.get("protocol") or 2) == "2"
        and getattr(pool, "cache", None) is None
    )
