"""The keyspace's commands on keys, strings and hashes, and on the server
(``PING``, ``TIME``, ``FLUSHALL``), each with Redis's replies and errors.
"""

from __future__ import annotations

import heapq
from typing import Any

from .store import CURSORS, KeyspaceBase
from .values import (
    _EXPIRY_OPTIONS,
    _INT64,
    _TYPES,
    OK,
    OVERFLOW,
    SYNTAX,
    CommandError,
    Status,
    Stream,
    ZSet,
    _arity,
    _integer,
    glob,
)


class Generic(KeyspaceBase):
    """Commands on any key, and on the server."""

    # -- generic ------------------------------------------------------------

    def del_(self, words: list[bytes]) -> int:
        return sum(self.lookup(key) is not None and self.remove(key) for key in words[1:])

    def exists(self, words: list[bytes]) -> int:
        return sum(self.lookup(key) is not None for key in words[1:])

    def type_(self, words: list[bytes]) -> Status:
        value = self.lookup(words[1])
        return Status(_TYPES.get(type(value), b"none"))

    def _expire(self, key: bytes, deadline: int) -> int:
        if self.lookup(key) is None:
            return 0
        if deadline <= self.now:
            self.remove(key)
        else:
            self.expire_at(key, deadline)
        return 1

    def pexpire(self, words: list[bytes]) -> int:
        return self._expire(words[1], self.now + _integer(words[2]))

    def expire(self, words: list[bytes]) -> int:
        return self._expire(words[1], self.now + _integer(words[2]) * 1000)

    def pexpireat(self, words: list[bytes]) -> int:
        return self._expire(words[1], _integer(words[2]))

    def persist(self, words: list[bytes]) -> int:
        if self.lookup(words[1]) is None or words[1] not in self.expires:
            return 0
        self._unexpire(words[1])
        return 1

    def pttl(self, words: list[bytes]) -> int:
        if self.lookup(words[1]) is None:
            return -2
        deadline = self.expires.get(words[1])
        return -1 if deadline is None else deadline - self.now

    def ttl(self, words: list[bytes]) -> int:
        left = self.pttl(words)
        return left if left < 0 else (left + 500) // 1000

    def keys(self, words: list[bytes]) -> list[bytes]:
        match = glob(words[1])
        return [key for key in self.keys_alive() if match is None or match(key)]

    def scan(self, words: list[bytes]) -> list[Any]:
        """SCAN, visiting keys in byte order: a cursor stands for the last
        key it returned (the last :data:`CURSORS` cursors are kept), so
        every key that exists from the first call to the last is returned
        exactly once, whatever is added or deleted meanwhile."""
        cursor = _integer(words[1], "ERR invalid cursor")
        if cursor < 0:
            raise CommandError("ERR invalid cursor")
        match, count, kind = None, 10, None
        i = 2
        while i < len(words):
            option = words[i].upper()
            if i + 1 >= len(words):
                raise CommandError(SYNTAX)
            if option == b"MATCH":
                match = glob(words[i + 1])
            elif option == b"COUNT":
                count = _integer(words[i + 1])
                if count < 1:
                    raise CommandError(SYNTAX)
            elif option == b"TYPE":
                kind = words[i + 1].lower()
            else:
                raise CommandError(SYNTAX)
            i += 2
        # An unknown cursor (one of too long ago) starts again: keys may be
        # returned twice, as Redis allows, but none is missed.
        after = self._cursors.pop(cursor, None)
        pending = [key for key in self.data if after is None or key > after]
        page = heapq.nsmallest(count, pending)
        following = b"0"
        if len(pending) > count:
            self._next_cursor += 1
            self._cursors[self._next_cursor] = page[-1]
            if len(self._cursors) > CURSORS:
                del self._cursors[next(iter(self._cursors))]
            following = b"%d" % self._next_cursor
        found = []
        for key in page:
            value = self.lookup(key)
            if value is None or (match is not None and not match(key)):
                continue
            if kind is None or _TYPES[type(value)] == kind:
                found.append(key)
        return [following, found]

    def dump(self, words: list[bytes]) -> bytes | None:
        """A snapshot of a value, for telling whether it changed: opaque,
        and not Redis's serialization (no RESTORE takes it)."""
        value = self.lookup(words[1])
        if value is None:
            return None
        if type(value) is ZSet:
            value = value.items
        elif type(value) is Stream:
            value = (value.entries, value.last)
        return b"embedded:" + repr(value).encode()

    def dbsize(self, words: list[bytes]) -> int:
        return len(self.keys_alive())

    def flushall(self, words: list[bytes]) -> Status:
        if len(words) > 1 and words[1].upper() not in (b"SYNC", b"ASYNC"):
            raise CommandError(SYNTAX)
        self.data.clear()
        self.expires.clear()
        self._buckets.clear()
        self._seconds.clear()
        return OK

    def ping(self, words: list[bytes]) -> Any:
        return words[1] if len(words) == 2 else Status(b"PONG")

    def time_(self, words: list[bytes]) -> list[bytes]:
        micros = int(self.clock() * 1_000_000)
        return [b"%d" % (micros // 1_000_000), b"%d" % (micros % 1_000_000)]


class Strings(KeyspaceBase):
    """Commands on strings."""

    # -- strings ------------------------------------------------------------

    def get(self, words: list[bytes]) -> bytes | None:
        value: bytes | None = self.typed(words[1], bytes)
        return value

    def set(self, words: list[bytes]) -> Any:
        key, value = words[1], words[2]
        condition, get, deadline, keep = b"", False, None, False
        i = 3
        while i < len(words):
            option = words[i].upper()
            if option in (b"NX", b"XX") and not condition:
                condition = option
            elif option == b"GET" and not get:
                get = True
            elif option == b"KEEPTTL" and deadline is None and not keep:
                keep = True
            elif option in _EXPIRY_OPTIONS and deadline is None and not keep and i + 1 < len(words):
                i += 1
                amount = _integer(words[i])
                if amount <= 0:
                    raise CommandError("ERR invalid expire time in 'set' command")
                scale, base = _EXPIRY_OPTIONS[option]
                deadline = base * self.now + scale * amount
            else:
                raise CommandError(SYNTAX)
            i += 1
        old = None
        if get:
            old = self.typed(key, bytes)
        elif condition:
            old = self.lookup(key)
        if (condition == b"NX" and old is not None) or (condition == b"XX" and old is None):
            return old if get else None
        self.data[key] = value
        if deadline is not None:
            if deadline <= self.now:
                self.remove(key)
            else:
                self.expire_at(key, deadline)
        elif not keep:
            self._unexpire(key)
        return old if get else OK

    def mset(self, words: list[bytes]) -> Status:
        if len(words) % 2 == 0:
            raise _arity(words[0])
        for i in range(1, len(words), 2):
            self._unexpire(words[i])
            self.data[words[i]] = words[i + 1]
        return OK

    def incrby(self, words: list[bytes]) -> int:
        return self._incr(words[1], _integer(words[2]))

    def incr(self, words: list[bytes]) -> int:
        return self._incr(words[1], 1)

    def _incr(self, key: bytes, by: int) -> int:
        old = self.typed(key, bytes)
        number = 0 if old is None else _integer(old)
        result = number + by
        if not _INT64[0] <= result <= _INT64[1]:
            raise CommandError(OVERFLOW)
        self.store(key, b"%d" % result)
        return result


class Hashes(KeyspaceBase):
    """Commands on hashes."""

    # -- hashes -------------------------------------------------------------

    def hget(self, words: list[bytes]) -> bytes | None:
        fields = self.typed(words[1], dict)
        return None if fields is None else fields.get(words[2])

    def hmget(self, words: list[bytes]) -> list[bytes | None]:
        fields = self.typed(words[1], dict) or {}
        return [fields.get(name) for name in words[2:]]

    def hgetall(self, words: list[bytes]) -> list[bytes]:
        fields = self.typed(words[1], dict) or {}
        return [part for pair in fields.items() for part in pair]

    def hlen(self, words: list[bytes]) -> int:
        return len(self.typed(words[1], dict) or ())

    def hset(self, words: list[bytes]) -> int:
        if len(words) % 2:
            raise _arity(words[0])
        fields = self.typed(words[1], dict)
        if fields is None:
            fields = {}
            self.store(words[1], fields)
        added = 0
        for i in range(2, len(words), 2):
            added += words[i] not in fields
            fields[words[i]] = words[i + 1]
        return added

    def hincrby(self, words: list[bytes]) -> int:
        by = _integer(words[3])
        fields = self.typed(words[1], dict)
        old = None if fields is None else fields.get(words[2])
        number = 0 if old is None else _integer(old, "ERR hash value is not an integer")
        result = number + by
        if not _INT64[0] <= result <= _INT64[1]:
            raise CommandError(OVERFLOW)
        if fields is None:
            fields = {}
            self.store(words[1], fields)
        fields[words[2]] = b"%d" % result
        return result

    def hdel(self, words: list[bytes]) -> int:
        fields = self.typed(words[1], dict)
        if fields is None:
            return 0
        removed = sum(fields.pop(name, None) is not None for name in words[2:])
        self.drop_if_empty(words[1], fields)
        return removed
