"""The keyspace: every command the store implements, found by name and
checked for its arity, as Redis dispatches them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .aggregates import SortedSets, Streams
from .commands import Generic, Hashes, Strings
from .values import CommandError

#: Each command: its method on :class:`Keyspace`, and Redis's arity (the
#: exact count of words with the name, or at least -arity).
Command = tuple[Callable[["Keyspace", list[bytes]], Any], int]


class Keyspace(Generic, Strings, Hashes, SortedSets, Streams):
    """Keys and values, with millisecond expiry; every method takes the
    words of one command (name first, as bytes) and returns its reply:
    bytes, an int, None (a nil), a list, or a :class:`Status`; an error is a
    :class:`CommandError`.

    Not locked: :class:`EmbeddedRedis` holds its lock around each call.

    :param clock: seconds since the epoch, for expiry, ``TIME`` and stream IDs.
    """

    # -- dispatch -----------------------------------------------------------

    def execute(self, words: Sequence[bytes]) -> Any:
        """Run one command.

        :raises CommandError: its error reply.
        """
        entry = COMMANDS.get(words[0]) or COMMANDS.get(bytes(words[0]).upper())
        if entry is None:
            shown = words[0].decode("utf-8", "replace")
            raise CommandError(f"ERR unknown command '{shown}', with args beginning with: ")
        method, arity = entry
        count = len(words)
        if (arity > 0 and count != arity) or count < -arity:
            raise CommandError(
                f"ERR wrong number of arguments for '{words[0].decode('utf-8', 'replace').lower()}' command"
            )
        return method(self, words if type(words) is list else list(words))


COMMANDS: dict[bytes, Command] = {
    b"GET": (Keyspace.get, 2),
    b"SET": (Keyspace.set, -3),
    b"MSET": (Keyspace.mset, -3),
    b"INCR": (Keyspace.incr, 2),
    b"INCRBY": (Keyspace.incrby, 3),
    b"DEL": (Keyspace.del_, -2),
    b"UNLINK": (Keyspace.del_, -2),
    b"EXISTS": (Keyspace.exists, -2),
    b"TYPE": (Keyspace.type_, 2),
    b"PEXPIRE": (Keyspace.pexpire, 3),
    b"EXPIRE": (Keyspace.expire, 3),
    b"PEXPIREAT": (Keyspace.pexpireat, 3),
    b"PERSIST": (Keyspace.persist, 2),
    b"PTTL": (Keyspace.pttl, 2),
    b"TTL": (Keyspace.ttl, 2),
    b"KEYS": (Keyspace.keys, 2),
    b"SCAN": (Keyspace.scan, -2),
    b"DBSIZE": (Keyspace.dbsize, 1),
    b"DUMP": (Keyspace.dump, 2),
    b"FLUSHALL": (Keyspace.flushall, -1),
    b"FLUSHDB": (Keyspace.flushall, -1),
    b"PING": (Keyspace.ping, -1),
    b"TIME": (Keyspace.time_, 1),
    b"HGET": (Keyspace.hget, 3),
    b"HMGET": (Keyspace.hmget, -3),
    b"HGETALL": (Keyspace.hgetall, 2),
    b"HLEN": (Keyspace.hlen, 2),
    b"HSET": (Keyspace.hset, -4),
    b"HINCRBY": (Keyspace.hincrby, 4),
    b"HDEL": (Keyspace.hdel, -3),
    b"ZADD": (Keyspace.zadd, -4),
    b"ZCARD": (Keyspace.zcard, 2),
    b"ZSCORE": (Keyspace.zscore, 3),
    b"ZCOUNT": (Keyspace.zcount, 4),
    b"ZRANGE": (Keyspace.zrange, -4),
    b"ZRANGEBYSCORE": (Keyspace.zrangebyscore, -4),
    b"ZREM": (Keyspace.zrem, -3),
    b"ZREMRANGEBYSCORE": (Keyspace.zremrangebyscore, 4),
    b"XADD": (Keyspace.xadd, -5),
    b"XRANGE": (Keyspace.xrange, -4),
    b"XREVRANGE": (Keyspace.xrevrange, -4),
    b"XLEN": (Keyspace.xlen, 2),
}
