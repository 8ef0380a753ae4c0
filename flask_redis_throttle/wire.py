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

This module imports Redis but not Flask.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import redis
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ReadOnlyError
from redis.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

hiredis: Any
try:  # pragma: no cover - which branch runs depends on the install
    import hiredis
except ImportError:  # pragma: no cover
    hiredis = None

__all__ = ["KEY_CACHE_SIZE", "LeanClient", "Replay", "lean_client"]

#: How many encoded keys and arguments are kept (each, and each request's
#: keys and arguments together): enough for the identities of a busy minute,
#: bounded so that a flood of new identities cannot grow the process.
KEY_CACHE_SIZE = 8192

#: The connection classes whose socket and parser this path knows: redis-py's
#: own, over TCP, TLS, a Unix socket, and to a Sentinel's master. Exact
#: classes only: a subclass may change how commands are sent.
CONNECTIONS: frozenset[type] = frozenset(
    {Connection, SSLConnection, UnixDomainSocketConnection, SentinelManagedConnection, SentinelManagedSSLConnection}
)

#: The attribute, on a redis-py connection, of its hiredis reader for this path.
_READER = "_flask_redis_throttle_reader"

_RECV_SIZE = 65536


class Replay(redis.ConnectionError):
    """The lean call failed where redis-py's own :class:`~redis.retry.Retry`
    would try again, so the caller should make the call again through
    redis-py's normal path (the failed connection was disconnected).

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
    if not isinstance(pool, redis.ConnectionPool) or pool.connection_class not in CONNECTIONS:
        return None
    if str(pool.connection_kwargs.get("protocol") or 2) != "2" or getattr(pool, "cache", None) is not None:
        return None
    return LeanClient(pool)


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
            self._drop(conn)
            raise redis.TimeoutError(f"Timeout reading from {_where(conn)}") from None
        except OSError as error:
            self._drop(conn)
            raise redis.ConnectionError(f"Error while reading from {_where(conn)} : {error.args}") from error
        except BaseException:
            self._drop(conn)
            raise
        if conn.health_check_interval:
            conn.next_health_check = time.monotonic() + conn.health_check_interval
        if isinstance(reply, hiredis.ReplyError):
            raise self._error(conn, str(reply))
        return reply

    @staticmethod
    def _drop(conn: Any) -> None:
        """Forget the reader of a connection whose reply was not read whole."""
        conn.__dict__.pop(_READER, None)

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
