"""The embedded ``memory://`` store: a small keyspace in this process, and
the rate limit scripts run on it by Lua 5.1, the Lua Redis runs.

A rate limiter on ``memory://`` runs the very scripts it runs on Redis, so
that what a test or a development server sees is what production does. It
needs neither a socket nor a command parser for that: each script is
compiled once per process (by its SHA1, as Redis caches it), and its
``redis.call`` goes straight to a Python function on the keyspace.

The keyspace implements exactly the commands the scripts and the package
send (strings with millisecond expiry, hashes, sorted sets, the stream of the
refusal log, ``TIME``, and ``SCAN``/``KEYS``/``DEL``/``TYPE`` for resets and
tests), with Redis's replies and errors, and Redis's conversions between Lua
and replies. ``tests/test_embedded.py`` holds each of them against a real
server.

* Atomic: one lock is held around every script and every command, as Redis
  runs one at a time.
* Expiry is lazy (a key past its deadline is gone the moment anything reads
  it) and swept: every call first deletes up to :data:`SWEEP` keys whose
  deadline has passed, oldest second first, so that a stream of identities
  that never come back cannot grow the process. No thread is started.

This module imports Redis (for its exceptions) but not Flask.
"""

from __future__ import annotations

import hashlib
import heapq
import importlib
import importlib.util
import math
import os
import re
import threading
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any, TypeVar

import redis
from redis._parsers.base import BaseParser

__all__ = ["CURSORS", "LUAS", "SWEEP", "EmbeddedRedis", "Keyspace", "Status"]

#: How many expired keys each call may delete at most, beyond the ones it
#: reads: more than any script writes, so the sweep keeps pace with any
#: stream of new keys, and little enough that no request pays for a large
#: expiry at once.
SWEEP = 64

#: How many SCAN cursors are remembered: an iteration left unfinished is
#: forgotten after this many more have started.
CURSORS = 1024

_T = TypeVar("_T")

_INT = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
_INT64 = (-(2**63), 2**63 - 1)
_FLOAT = re.compile(rb"\s*[-+]?(?:inf|infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[-+]?[0-9]+)?)\Z", re.IGNORECASE)
_MAX_SEQ = 2**64 - 1
#: SET's expiry options: the deadline is base * now + scale * amount, in ms.
_EXPIRY_OPTIONS = {b"EX": (1000, 1), b"PX": (1, 1), b"EXAT": (1000, 0), b"PXAT": (1, 0)}

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
OVERFLOW = "ERR increment or decrement would overflow"
BAD_STREAM_ID = "ERR Invalid stream ID specified as stream command argument"


class Status(bytes):
    """A status reply (``+OK``), which Lua sees as ``{ok = ...}`` and a
    client as its bytes."""


class CommandError(Exception):
    """An error reply: ``message`` as Redis sends it, error code first."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def response_error(message: str) -> redis.RedisError:
    """The exception redis-py raises for the error reply ``message``
    (a :class:`~redis.exceptions.NoScriptError` for ``NOSCRIPT``, the code
    ``ERR`` left out of the message, as redis-py does)."""
    error: redis.RedisError = BaseParser.parse_error(message)  # type: ignore[no-untyped-call]
    return error


OK = Status(b"OK")


def _arity(name: bytes) -> CommandError:
    return CommandError(f"ERR wrong number of arguments for '{name.decode('utf-8', 'replace').lower()}' command")


def _integer(value: bytes, error: str = NOT_INTEGER) -> int:
    """``value`` as Redis reads a 64-bit integer: no sign but ``-``, no
    leading zero, no spaces."""
    if _INT.match(value):
        number = int(value)
        if _INT64[0] <= number <= _INT64[1]:
            return number
    raise CommandError(error)


def _float(value: bytes, error: str = NOT_FLOAT) -> float:
    """``value`` as Redis reads a score (``inf`` and ``-inf`` included)."""
    if not _FLOAT.match(value):
        raise CommandError(error)
    return float(value)


def format_score(score: float) -> bytes:
    """A score as Redis replies it: whole numbers without a point, others
    with 17 significant digits (``%.17g``), infinities as ``inf``/``-inf``."""
    if score == score and abs(score) != float("inf") and score.is_integer() and abs(score) < 1e17:
        return b"%d" % int(score)
    if score == float("inf"):
        return b"inf"
    if score == float("-inf"):
        return b"-inf"
    return b"%.17g" % score


def _bound(value: bytes) -> tuple[float, bool]:
    """A score range bound: its score, and whether it is exclusive (``(``)."""
    exclusive = value.startswith(b"(")
    text = value[1:] if exclusive else value
    if not _FLOAT.match(text) or text.strip() != text:
        raise CommandError("ERR min or max is not a float")
    return float(text), exclusive


@lru_cache(maxsize=256)
def glob(pattern: bytes) -> Callable[[bytes], Any] | None:
    """The matcher of a Redis glob pattern (``*``, ``?``, ``[...]`` with ``^``
    and ranges, ``\\`` escapes); None for ``*``, which matches everything."""
    if pattern == b"*":
        return None
    out, i, n = [], 0, len(pattern)
    while i < n:
        char = pattern[i : i + 1]
        i += 1
        if char == b"*":
            out.append(b".*")
        elif char == b"?":
            out.append(b".")
        elif char == b"\\" and i < n:
            out.append(re.escape(pattern[i : i + 1]))
            i += 1
        elif char == b"[":
            i = _glob_class(pattern, i, out)
        else:
            out.append(re.escape(char))
    return re.compile(b"".join(out) + rb"\Z", re.DOTALL).match


def _glob_class(pattern: bytes, i: int, out: list[bytes]) -> int:
    """Translate the ``[...]`` class starting at ``i``, just after ``[``, as
    Redis's ``stringmatchlen`` reads it (an unclosed class runs to the end);
    return where the pattern goes on."""
    n = len(pattern)
    negate = i < n and pattern[i : i + 1] == b"^"
    if negate:
        i += 1
    parts: list[bytes] = []
    while i < n and pattern[i : i + 1] != b"]":
        if pattern[i : i + 1] == b"\\" and i + 1 < n:
            parts.append(re.escape(pattern[i + 1 : i + 2]))
            i += 2
        elif i + 2 < n and pattern[i + 1 : i + 2] == b"-":
            low, high = sorted((pattern[i], pattern[i + 2]))
            parts.append(re.escape(bytes([low])) + b"-" + re.escape(bytes([high])))
            i += 3
        else:
            parts.append(re.escape(pattern[i : i + 1]))
            i += 1
    body = b"".join(parts)
    if not body:
        out.append(b"[^\\s\\S]" if not negate else b"[\\s\\S]")
    else:
        out.append(b"[" + (b"^" if negate else b"") + body + b"]")
    return i + 1


class ZSet:
    """A sorted set: each member's score, and (score, member) pairs in
    Redis's order (by score, then by member's bytes)."""

    __slots__ = ("items", "scores")

    def __init__(self) -> None:
        self.scores: dict[bytes, float] = {}
        self.items: list[tuple[float, bytes]] = []

    def add(self, member: bytes, score: float) -> None:
        old = self.scores.get(member)
        if old is not None:
            if old == score:
                return
            self.remove(member)
        self.scores[member] = score
        insort(self.items, (score, member))

    def remove(self, member: bytes) -> bool:
        score = self.scores.pop(member, None)
        if score is None:
            return False
        del self.items[bisect_left(self.items, (score, member))]
        return True

    def span(self, low: tuple[float, bool], high: tuple[float, bool]) -> tuple[int, int]:
        """The indexes ``[start, stop)`` of the items in a score range."""
        start = self._first(low[0], after=low[1])
        stop = self._first(high[0], after=not high[1])
        return start, max(start, stop)

    def _first(self, score: float, after: bool) -> int:
        """The index of the first item whose score is at least ``score``
        (above it if ``after``). A one-item tuple sorts before every item of
        its score, so no key function is needed; the next float up turns
        "above" into "at least"."""
        if after:
            if score == math.inf:
                return len(self.items)
            score = math.nextafter(score, math.inf)
        return bisect_left(self.items, (score,))


class Stream:
    """A stream: entries in ID order, each its ``(ms, seq)`` ID and its
    flat field/value list, and the last ID ever given."""

    __slots__ = ("entries", "last")

    def __init__(self) -> None:
        self.entries: list[tuple[tuple[int, int], list[bytes]]] = []
        self.last = (0, 0)


def _stream_id(value: bytes, default_seq: int, exclusive_ok: bool = True) -> tuple[tuple[int, int], bool]:
    """An ID bound of XRANGE: ``-``, ``+``, ``ms`` or ``ms-seq``, maybe
    after ``(``. Returns the ID and whether it is exclusive."""
    exclusive = exclusive_ok and value.startswith(b"(")
    text = value[1:] if exclusive else value
    if text == b"-":
        return (0, 0), exclusive
    if text == b"+":
        return (_MAX_SEQ, _MAX_SEQ), exclusive
    ms, dash, seq = text.partition(b"-")
    try:
        if not ms.isdigit() or (dash and not seq.isdigit()):
            raise ValueError
        parsed = (int(ms), int(seq) if dash else default_seq)
    except ValueError:
        raise CommandError(BAD_STREAM_ID) from None
    if parsed[0] > _MAX_SEQ or parsed[1] > _MAX_SEQ:
        raise CommandError(BAD_STREAM_ID)
    return parsed, exclusive


def _format_id(entry_id: tuple[int, int]) -> bytes:
    return b"%d-%d" % entry_id


#: Each command: its method on :class:`Keyspace`, and Redis's arity (the
#: exact count of words with the name, or at least -arity).
Command = tuple[Callable[["Keyspace", list[bytes]], Any], int]


class Keyspace:
    """Keys and values, with millisecond expiry; every method takes the
    words of one command (name first, as bytes) and returns its reply:
    bytes, an int, None (a nil), a list, or a :class:`Status`; an error is a
    :class:`CommandError`.

    Not locked: :class:`EmbeddedRedis` holds its lock around each call.

    :param clock: seconds since the epoch, for expiry, ``TIME`` and stream IDs.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.data: dict[bytes, Any] = {}
        #: Each key's deadline, in milliseconds since the epoch.
        self.expires: dict[bytes, int] = {}
        #: Keys with a deadline, by the second it falls in; and those seconds, in a heap.
        self._buckets: dict[int, set[bytes]] = {}
        self._seconds: list[int] = []
        #: SCAN's cursors: the last key each returned, oldest first.
        self._cursors: dict[int, bytes] = {}
        self._next_cursor = 0
        #: The time every command of a call is judged at, in milliseconds:
        #: frozen for a script, as in Redis.
        self.now = 0

    # -- time and expiry --------------------------------------------------

    def tick(self) -> None:
        """Start a call: read the clock, then sweep some expired keys."""
        self.now = int(self.clock() * 1000)
        seconds = self._seconds
        if seconds and seconds[0] < self.now // 1000:
            self._sweep(SWEEP)

    def _sweep(self, budget: int) -> None:
        """Delete up to ``budget`` keys whose deadline's second has passed."""
        current = self.now // 1000
        seconds, buckets = self._seconds, self._buckets
        while seconds and seconds[0] < current and budget > 0:
            bucket = buckets[seconds[0]]
            while bucket and budget > 0:
                key = bucket.pop()
                self.data.pop(key, None)
                del self.expires[key]
                budget -= 1
            if not bucket:
                del buckets[heapq.heappop(seconds)]

    def _unexpire(self, key: bytes) -> None:
        deadline = self.expires.pop(key, None)
        if deadline is not None:
            self._buckets[deadline // 1000].discard(key)

    def expire_at(self, key: bytes, deadline: int) -> None:
        """Give the (existing) ``key`` a deadline, in epoch milliseconds."""
        self._unexpire(key)
        self.expires[key] = deadline
        second = deadline // 1000
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = set()
            heapq.heappush(self._seconds, second)
        bucket.add(key)

    def remove(self, key: bytes) -> bool:
        """Delete ``key`` (alive or not); whether it was there."""
        if self.data.pop(key, None) is None:
            return False
        self._unexpire(key)
        return True

    def lookup(self, key: bytes) -> Any:
        """The value of ``key``, None if it is missing or past its deadline
        (which deletes it: lazy expiry). Redis keeps a key until the
        millisecond after its deadline."""
        value = self.data.get(key)
        if value is not None:
            deadline = self.expires.get(key)
            if deadline is not None and deadline < self.now:
                self.remove(key)
                return None
        return value

    def typed(self, key: bytes, kind: type[_T]) -> _T | None:
        """The value of ``key`` if it is of ``kind``, None if missing.

        :raises CommandError: WRONGTYPE for a value of another type.
        """
        value = self.lookup(key)
        if value is not None and type(value) is not kind:
            raise CommandError(WRONGTYPE)
        return value

    def keys_alive(self) -> list[bytes]:
        """Every key that is not past its deadline."""
        now, expires = self.now, self.expires
        return [key for key in self.data if expires.get(key, now) >= now]

    def store(self, key: bytes, value: Any) -> None:
        self.data[key] = value

    def drop_if_empty(self, key: bytes, value: Any) -> None:
        """Delete an aggregate left empty, as Redis does (but not a stream)."""
        if not (value.scores if type(value) is ZSet else value):
            self.remove(key)

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

    # -- sorted sets --------------------------------------------------------

    def zadd(self, words: list[bytes]) -> Any:
        flags: set[bytes] = set()
        i = 2
        while i < len(words) and words[i].upper() in (b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"):
            flags.add(words[i].upper())
            i += 1
        pairs = words[i:]
        if not pairs or len(pairs) % 2:
            raise CommandError(SYNTAX)
        if {b"NX", b"XX"} <= flags:
            raise CommandError("ERR XX and NX options at the same time are not compatible")
        if len(flags & {b"NX", b"GT", b"LT"}) > 1:
            raise CommandError("ERR GT, LT, and/or NX options at the same time are not compatible")
        if b"INCR" in flags and len(pairs) != 2:
            raise CommandError("ERR INCR option supports a single increment-element pair")
        scores = [_float(pairs[j]) for j in range(0, len(pairs), 2)]
        zset = self.typed(words[1], ZSet)
        if zset is None:
            if b"XX" in flags:
                return None if b"INCR" in flags else 0
            zset = ZSet()
            self.store(words[1], zset)
        changed = added = 0
        result: Any = None
        for score, member in zip(scores, pairs[1::2], strict=True):
            old = zset.scores.get(member)
            if b"INCR" in flags:
                score += 0 if old is None else old
                if score != score:
                    raise CommandError("ERR resulting score is not a number (NaN)")
            if (old is None and b"XX" in flags) or (old is not None and b"NX" in flags):
                continue
            if old is not None and ((b"GT" in flags and score <= old) or (b"LT" in flags and score >= old)):
                continue
            if old is None:
                added += 1
            elif old != score:
                changed += 1
            zset.add(member, score)
            result = format_score(score)
        self.drop_if_empty(words[1], zset)
        if b"INCR" in flags:
            return result
        return added + changed if b"CH" in flags else added

    def zcard(self, words: list[bytes]) -> int:
        zset = self.typed(words[1], ZSet)
        return 0 if zset is None else len(zset.items)

    def zscore(self, words: list[bytes]) -> bytes | None:
        zset = self.typed(words[1], ZSet)
        score = None if zset is None else zset.scores.get(words[2])
        return None if score is None else format_score(score)

    def zcount(self, words: list[bytes]) -> int:
        low, high = _bound(words[2]), _bound(words[3])
        zset = self.typed(words[1], ZSet)
        if zset is None:
            return 0
        start, stop = zset.span(low, high)
        return stop - start

    def zrange(self, words: list[bytes]) -> list[bytes]:
        start, stop = _integer(words[2]), _integer(words[3])
        options = [word.upper() for word in words[4:]]
        if options not in ([], [b"WITHSCORES"]):
            raise CommandError(SYNTAX)
        zset = self.typed(words[1], ZSet)
        if zset is None:
            return []
        size = len(zset.items)
        start = max(start + size if start < 0 else start, 0)
        stop = stop + size if stop < 0 else stop
        if start > stop or start >= size:
            return []
        return _members(zset.items[start : min(stop, size - 1) + 1], bool(options))

    def zrangebyscore(self, words: list[bytes]) -> list[bytes]:
        low, high = _bound(words[2]), _bound(words[3])
        scores, offset, count = False, 0, -1
        i = 4
        while i < len(words):
            option = words[i].upper()
            if option == b"WITHSCORES":
                scores = True
                i += 1
            elif option == b"LIMIT" and i + 2 < len(words):
                offset, count = _integer(words[i + 1]), _integer(words[i + 2])
                i += 3
            else:
                raise CommandError(SYNTAX)
        zset = self.typed(words[1], ZSet)
        if zset is None or offset < 0:
            return []
        start, stop = zset.span(low, high)
        start += offset
        if count >= 0:
            stop = min(stop, start + count)
        return _members(zset.items[start:stop], scores)

    def zrem(self, words: list[bytes]) -> int:
        zset = self.typed(words[1], ZSet)
        if zset is None:
            return 0
        removed = sum(zset.remove(member) for member in words[2:])
        self.drop_if_empty(words[1], zset)
        return removed

    def zremrangebyscore(self, words: list[bytes]) -> int:
        low, high = _bound(words[2]), _bound(words[3])
        zset = self.typed(words[1], ZSet)
        if zset is None:
            return 0
        start, stop = zset.span(low, high)
        for _, member in zset.items[start:stop]:
            del zset.scores[member]
        del zset.items[start:stop]
        self.drop_if_empty(words[1], zset)
        return stop - start

    # -- streams ------------------------------------------------------------

    def xadd(self, words: list[bytes]) -> bytes | None:
        key, i = words[1], 2
        make, maxlen = True, None
        while i < len(words):
            option = words[i].upper()
            if option == b"NOMKSTREAM":
                make = False
                i += 1
            elif option == b"MAXLEN":
                i += 1
                if i < len(words) and words[i] in (b"=", b"~"):
                    i += 1
                if i >= len(words):
                    raise CommandError(SYNTAX)
                maxlen = _integer(words[i])
                if maxlen < 0:
                    raise CommandError("ERR The MAXLEN argument must be >= 0.")
                i += 1
            else:
                break
        if i >= len(words) or (len(words) - i - 1) < 2 or (len(words) - i - 1) % 2:
            raise CommandError("ERR wrong number of arguments for 'xadd' command")
        stream = self.typed(key, Stream)
        wanted = words[i]
        if wanted != b"*":
            entry_id = self._explicit_id(wanted, stream)
        if stream is None:
            if not make:
                return None
            stream = Stream()
            self.store(key, stream)
        if wanted == b"*":
            ms = max(self.now, stream.last[0])
            entry_id = (ms, stream.last[1] + 1 if ms == stream.last[0] else 0)
        stream.entries.append((entry_id, list(words[i + 1 :])))
        stream.last = entry_id
        if maxlen is not None and len(stream.entries) > maxlen:
            del stream.entries[: len(stream.entries) - maxlen]
        return _format_id(entry_id)

    def _explicit_id(self, wanted: bytes, stream: Stream | None) -> tuple[int, int]:
        """The ID an XADD asks for (``ms-seq`` or ``ms-*``), checked
        against the stream's last."""
        last = stream.last if stream is not None else (0, 0)
        if wanted.endswith(b"-*"):
            ms = _stream_id(wanted[:-2], 0, False)[0][0]
            entry_id = (ms, last[1] + 1 if ms == last[0] else 0)
            if ms < last[0]:
                entry_id = (0, 0)
        else:
            entry_id = _stream_id(wanted, 0, False)[0]
            if wanted in (b"-", b"+"):
                raise CommandError(BAD_STREAM_ID)
        if entry_id == (0, 0):
            raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
        if entry_id <= last:
            raise CommandError("ERR The ID specified in XADD is equal or smaller than the target stream top item")
        return entry_id

    def _xrange(self, key: bytes, low: bytes, high: bytes, rest: list[bytes], reverse: bool) -> list[Any]:
        start, start_ex = _stream_id(low, 0)
        end, end_ex = _stream_id(high, _MAX_SEQ)
        count = None
        if rest:
            if len(rest) != 2 or rest[0].upper() != b"COUNT":
                raise CommandError(SYNTAX)
            count = _integer(rest[1])
        stream = self.typed(key, Stream)
        if stream is None or (count is not None and count <= 0):
            return []
        found = [
            [_format_id(entry_id), list(fields)]
            for entry_id, fields in (reversed(stream.entries) if reverse else stream.entries)
            if (start < entry_id or (start == entry_id and not start_ex))
            and (entry_id < end or (entry_id == end and not end_ex))
        ]
        return found if count is None else found[:count]

    def xrange(self, words: list[bytes]) -> list[Any]:
        return self._xrange(words[1], words[2], words[3], words[4:], False)

    def xrevrange(self, words: list[bytes]) -> list[Any]:
        return self._xrange(words[1], words[3], words[2], words[4:], True)

    def xlen(self, words: list[bytes]) -> int:
        stream = self.typed(words[1], Stream)
        return 0 if stream is None else len(stream.entries)


def _members(items: Iterable[tuple[float, bytes]], scores: bool) -> list[bytes]:
    if scores:
        return [part for score, member in items for part in (member, format_score(score))]
    return [member for _, member in items]


_TYPES: dict[type, bytes] = {bytes: b"string", dict: b"hash", ZSet: b"zset", Stream: b"stream"}

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


# -- the Lua host ---------------------------------------------------------------

#: Builds the sandbox every script runs in, from redis.call and redis.pcall,
#: and returns the function that compiles a script into it. The globals are
#: those of a Redis script the package's scripts use, and a few more of
#: Lua's base library; reading a global that does not exist, or creating
#: one, is an error, as in Redis.
_SANDBOX = """
local py_call, py_pcall, OK = ...
-- A reply of OK comes from Python as the OK marker: a fresh {ok = 'OK'}
-- here is cheaper than one built in Python.
local function status(reply)
  if reply == OK then
    return {ok = 'OK'}
  end
  return reply
end
local redis = {
  call = function(...) return status(py_call(...)) end,
  pcall = function(...) return status(py_pcall(...)) end,
  error_reply = function(message) return {err = message} end,
  status_reply = function(message) return {ok = message} end,
  log = function() end,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
}
local env = {
  redis = redis, string = string, math = math, table = table,
  tonumber = tonumber, tostring = tostring, ipairs = ipairs, pairs = pairs,
  unpack = unpack, type = type, select = select, next = next, error = error,
  assert = assert, pcall = pcall, rawget = rawget, rawset = rawset,
  rawequal = rawequal, setmetatable = setmetatable, getmetatable = getmetatable,
  _VERSION = _VERSION,
}
setmetatable(env, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function(_, name)
    error("Script attempted to create global variable '" .. tostring(name) .. "'", 2)
  end,
})
local loadstring, setfenv = loadstring, setfenv
local function compile(source)
  local chunk, message = loadstring(source, '@user_script')
  if not chunk then
    return nil, message
  end
  setfenv(chunk, env)
  return chunk
end
-- A script's return value, as it goes back to Python. An array of numbers
-- and strings (a rate limit script's reply) is converted here, as Redis
-- converts it: up to its first nil, numbers truncated to integers; it goes
-- back as several values, true, its length and its items, so that Python
-- takes it as a tuple. Anything else goes back as it is, one value.
local floor, ceil = math.floor, math.ceil
local function reply(result)
  if type(result) ~= 'table' or result.err ~= nil or result.ok ~= nil then
    return result
  end
  local items, n = {}, 0
  while true do
    local item = result[n + 1]
    local kind = type(item)
    if kind == 'number' then
      if item >= 0 then item = floor(item) else item = ceil(item) end
    elseif kind ~= 'string' then
      if item == nil then
        break
      end
      return result
    end
    n = n + 1
    items[n] = item
  end
  return true, n, unpack(items, 1, n)
end
-- Runs a chunk with the first `keys` arguments as KEYS, the others as ARGV.
local function run(chunk, keys, ...)
  local all, KEYS, ARGV = {...}, {}, {}
  for i = 1, keys do
    KEYS[i] = all[i]
  end
  for i = keys + 1, #all do
    ARGV[i - keys] = all[i]
  end
  return reply(chunk(KEYS, ARGV))
end
return compile, run
"""

#: Put before a script's text, on its first line so that line numbers in
#: errors are the script's own: KEYS and ARGV are the chunk's arguments.
_HEAD = "local KEYS, ARGV = ...; "

#: Integers below this are numbers Lua holds exactly, and written in full.
_EXACT = 2**53

_LUA_ARGUMENT = "ERR Lua redis lib command arguments must be strings or integers"


class LuaHost:
    """One Lua runtime for the process, the scripts compiled on it (by
    SHA1), and ``redis.call`` bound to whichever keyspace runs a script.

    Not locked: callers hold :data:`_LOCK`.

    :param name: the lupa module of the runtime, one of :data:`LUAS`.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.lua = importlib.import_module(f"lupa.{name}")
        self.runtime = self.lua.LuaRuntime(
            encoding=None, register_eval=False, register_builtins=False, unpack_returned_tuples=False
        )
        self.table_from = self.runtime.table_from
        #: What a command's OK comes back to Lua as (see _SANDBOX).
        self.ok = self.runtime.table()
        self.compiler, self.runner = self.runtime.execute(_SANDBOX, self._call, self._pcall, self.ok)
        self.functions: dict[str, Any] = {}
        self.keyspace: Keyspace | None = None

    def compile(self, sha: str, text: bytes) -> Any:
        """The compiled script ``text``, whose SHA1 is ``sha``.

        :raises CommandError: when it does not compile.
        """
        function = self.functions.get(sha)
        if function is None:
            function = self.compiler(_HEAD.encode() + text)
            if isinstance(function, tuple):  # nil and the message
                message = function[1]
                raise CommandError(f"ERR Error compiling script (new function): {message.decode('utf-8', 'replace')}")
            self.functions[sha] = function
            _SOURCES[sha] = text
        return function

    def run(self, keyspace: Keyspace, sha: str, keys: int, words: Sequence[bytes]) -> Any:
        """Run a compiled script on ``keyspace`` and return its reply,
        converted as Redis converts a script's return value.

        :raises CommandError: the error of a ``redis.call`` (which aborts
            the script), of the script itself, or the one it returned.
        """
        function = self.functions.get(sha)
        if function is None:  # known to the store, not yet to this runtime (see _after_fork)
            function = self.compile(sha, _SOURCES[sha])
        self.keyspace = keyspace
        try:
            result = self.runner(function, keys, *words)
        except CommandError as error:
            raise CommandError(f"{error.message} script: {sha}") from None
        except self.lua.LuaError as error:
            message = str(error).split("\nstack traceback:", 1)[0]
            raise CommandError(f"ERR {message} script: {sha}") from None
        finally:
            self.keyspace = None
        if type(result) is tuple:  # an array of numbers and strings (see _SANDBOX)
            return [item if type(item) is not float else self.from_lua(item) for item in result[2:]]
        return self.from_lua(result)

    def _call(self, *words: Any) -> Any:
        """``redis.call``: run a command; its error aborts the script.

        The two calls every fixed-window and GCRA counter makes, a GET and
        a SET with PX, skip the generic path when their arguments are those
        it would run anyway.
        """
        keyspace = self.keyspace
        assert keyspace is not None
        count = len(words)
        if count == 2 and words[0] == b"GET" and type(words[1]) is bytes:
            value = keyspace.typed(words[1], bytes)
            return False if value is None else value
        if count == 5 and words[0] == b"SET" and words[3] == b"PX":
            key, value, amount = words[1], words[2], words[4]
            if type(key) is bytes and type(value) is bytes and type(amount) is int and 0 < amount < _EXACT:
                keyspace.data[key] = value
                keyspace.expire_at(key, keyspace.now + amount)
                return self.ok
        return self._to_lua(keyspace.execute([word if type(word) is bytes else _lua_word(word) for word in words]))

    def _pcall(self, *words: Any) -> Any:
        """``redis.pcall``: run a command; its error is returned as ``{err = ...}``."""
        try:
            return self._call(*words)
        except CommandError as error:
            return self.table_from({b"err": error.message.encode()})

    def _to_lua(self, reply: Any) -> Any:
        """A reply as Redis gives it to a script: integers as numbers, a
        nil as false, arrays as tables, a status as ``{ok = ...}``."""
        kind = type(reply)
        if kind is bytes or kind is int:
            return reply
        if reply is None:
            return False
        if kind is list:
            return self.table_from([self._to_lua(item) for item in reply])
        if reply is OK:
            return self.ok
        return self.table_from({b"ok": bytes(reply)})

    def from_lua(self, value: Any) -> Any:
        """A script's return value as Redis replies it: numbers truncated to
        integers, true as 1 and false as a nil, a table with ``err`` as an
        error, with ``ok`` as a status, any other as an array up to its
        first nil."""
        return _from_lua(value, self.lua.lua_type)


def _lua_word(word: Any) -> bytes:
    """A ``redis.call`` argument as Redis takes it: a string as it is, a
    number with 17 significant digits (``%.17g``, as Redis up to 7.0 writes
    it; later versions write the shortest form that reads back the same,
    which differs only for numbers that are not whole)."""
    kind = type(word)
    if kind is bytes:
        return word  # type: ignore[no-any-return]
    if kind is int or kind is float:
        return b"%.17g" % word
    raise CommandError(_LUA_ARGUMENT)


def _from_lua(value: Any, lua_type: Callable[[Any], str | None]) -> Any:
    kind = type(value)
    if kind is int or kind is bytes:
        return value
    if kind is float:
        return int(value) if value == value and abs(value) != float("inf") else -(2**63)
    if kind is bool:
        return 1 if value else None
    if lua_type(value) != "table":
        return None
    error = value[b"err"]
    if type(error) is bytes:
        raise CommandError(error.decode("utf-8", "replace"))
    status = value[b"ok"]
    if type(status) is bytes:
        return Status(status)
    items = []
    i = 1
    item = value[1]
    while item is not None:
        items.append(_from_lua(item, lua_type))
        i += 1
        item = value[i]
    return items


#: The lupa modules scripts may run on, by preference. LuaJIT runs the
#: language of Lua 5.1, the one Redis runs, several times faster than Lua
#: 5.1 itself (most of a request's time on this store is spent in the
#: script); lupa has no LuaJIT on some platforms, where Lua 5.1 runs them.
#: tests/test_embedded.py holds both against a real server.
LUAS = ("luajit21", "lua51")

#: The one lock of every embedded store in the process: Redis runs one
#: command or script at a time, and so does the one Lua runtime.
_LOCK = threading.Lock()


def _after_fork() -> None:
    """A child forked while another thread was inside a call inherits the
    lock, and the Lua runtime's own, held by a thread it does not have: it
    gets a free lock and new runtimes, on which scripts are compiled again
    on their first call."""
    global _LOCK
    _LOCK = threading.Lock()
    _HOSTS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
_HOSTS: dict[str, LuaHost] = {}
#: Every script compiled in the process, by SHA1, to compile it again on a
#: new runtime.
_SOURCES: dict[str, bytes] = {}


def lua_host(name: str | None = None) -> LuaHost:
    """The process's Lua host on the lupa module ``name`` (see :data:`LUAS`),
    made on first use: by default, the first of :data:`LUAS` that lupa has."""
    if name is None:
        name = _default_lua()
    host = _HOSTS.get(name)
    if host is None:
        host = _HOSTS[name] = LuaHost(name)
    return host


def _default_lua() -> str:
    for name in LUAS:
        if importlib.util.find_spec(f"lupa.{name}") is not None:
            return name
    raise ImportError(f"lupa has none of {', '.join(LUAS)}")  # pragma: no cover - lupa always has lua51


# -- the client -------------------------------------------------------------------


def encode(value: Any) -> bytes:
    """A command argument, encoded as redis-py encodes it."""
    kind = type(value)
    if kind is bytes:
        return value  # type: ignore[no-any-return]
    if kind is str:
        return value.encode()  # type: ignore[no-any-return]
    if kind is int:
        return b"%d" % value
    if kind is float:
        return repr(value).encode()
    if isinstance(value, (bytes, memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return str(value).encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    raise redis.DataError(
        f"Invalid input of type: '{type(value).__name__}'. Convert to a bytes, string, int or float first."
    )


class EmbeddedRedis:
    """The ``memory://`` client: the redis-py methods the package (and its
    tests) call, on a :class:`Keyspace` of its own, replying as a
    :class:`redis.Redis` with ``decode_responses=False`` replies.

    :param clock: seconds since the epoch (see :class:`Keyspace`).
    :param lua: the lupa module to run scripts on, one of :data:`LUAS`; by
        default the first that lupa has.
    """

    def __init__(self, clock: Callable[[], float] = time.time, lua: str | None = None) -> None:
        self.keyspace = Keyspace(clock)
        #: The lupa module its scripts run on.
        self.lua = lua_host(lua).name
        #: The scripts this store knows (``SCRIPT LOAD``, ``EVAL``), by SHA1.
        self.scripts: set[str] = set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} memory://: {len(self.keyspace.data)} keys>"

    # -- commands ---------------------------------------------------------------

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command and return its reply as it comes from Redis
        (before redis-py's per-command conversions).

        :raises redis.ResponseError: its error reply, as redis-py raises it.
        """
        words = [encode(arg) for arg in args]
        with _LOCK:
            self.keyspace.tick()
            try:
                return self._dispatch(words)
            except CommandError as error:
                raise response_error(error.message) from None

    def _dispatch(self, words: list[bytes]) -> Any:
        name = words[0].upper()
        if name == b"EVALSHA":
            return self._evaluate(words[1].decode("utf-8", "replace").lower(), words[2:])
        if name == b"EVAL":
            return self._evaluate(self._load(words[1]), words[2:])
        if name == b"SCRIPT":
            return self._script(words[1:])
        return self.keyspace.execute(words)

    def _load(self, text: bytes) -> str:
        sha = hashlib.sha1(text).hexdigest()
        lua_host(self.lua).compile(sha, text)
        self.scripts.add(sha)
        return sha

    def _evaluate(self, sha: str, rest: list[bytes]) -> Any:
        if not rest:
            raise CommandError("ERR wrong number of arguments for 'evalsha' command")
        count = _integer(rest[0])
        if count < 0:
            raise CommandError("ERR Number of keys can't be negative")
        if count > len(rest) - 1:
            raise CommandError("ERR Number of keys can't be greater than number of args")
        if sha not in self.scripts:
            raise CommandError("NOSCRIPT No matching script. Please use EVAL.")
        return lua_host(self.lua).run(self.keyspace, sha, count, rest[1:])

    def _script(self, words: list[bytes]) -> Any:
        command = words[0].upper() if words else b""
        if command == b"LOAD" and len(words) == 2:
            return self._load(words[1]).encode()
        if command == b"FLUSH":
            self.scripts.clear()
            return OK
        if command == b"EXISTS" and len(words) > 1:
            return [int(word.decode("utf-8", "replace").lower() in self.scripts) for word in words[1:]]
        raise CommandError("ERR unknown subcommand or wrong number of arguments for 'script' command")

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        """Run a script this store knows by its SHA1: the one call of every
        request, so it skips the generic command path when it can.

        :raises redis.exceptions.NoScriptError: for a SHA1 it does not know.
        """
        if type(sha) is not str or type(numkeys) is not int or not 0 <= numkeys <= len(keys_and_args):
            return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)
        # Keys are strings and most arguments integers: encoded inline.
        words = [
            word.encode() if type(word) is str else b"%d" % word if type(word) is int else encode(word)
            for word in keys_and_args
        ]
        with _LOCK:
            self.keyspace.tick()
            try:
                if sha not in self.scripts:
                    raise CommandError("NOSCRIPT No matching script. Please use EVAL.")
                return lua_host(self.lua).run(self.keyspace, sha, numkeys, words)
            except CommandError as error:
                raise response_error(error.message) from None

    def eval(self, script: str | bytes, numkeys: int, *keys_and_args: Any) -> Any:
        """Run a script's text (compiled once per process, then known here by its SHA1)."""
        return self.execute_command("EVAL", script, numkeys, *keys_and_args)

    def script_load(self, script: str | bytes) -> str:
        return str(self.execute_command("SCRIPT", "LOAD", script).decode())

    def script_exists(self, *shas: str) -> list[bool]:
        return [bool(found) for found in self.execute_command("SCRIPT", "EXISTS", *shas)]

    def script_flush(self, sync_type: str | None = None) -> bool:
        self.execute_command("SCRIPT", "FLUSH")
        return True

    def get(self, name: Any) -> bytes | None:
        value: bytes | None = self.execute_command("GET", name)
        return value

    def set(
        self,
        name: Any,
        value: Any,
        ex: int | None = None,
        px: int | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
        get: bool = False,
    ) -> Any:
        words: list[Any] = ["SET", name, value]
        if ex is not None:
            words += ["EX", ex]
        if px is not None:
            words += ["PX", px]
        words += [flag for flag, on in (("NX", nx), ("XX", xx), ("KEEPTTL", keepttl), ("GET", get)) if on]
        reply = self.execute_command(*words)
        return reply if get else (reply == b"OK" or None)

    def delete(self, *names: Any) -> int:
        return int(self.execute_command("DEL", *names))

    def exists(self, *names: Any) -> int:
        return int(self.execute_command("EXISTS", *names))

    def type(self, name: Any) -> bytes:
        return bytes(self.execute_command("TYPE", name))

    def pexpire(self, name: Any, milliseconds: int) -> bool:
        return bool(self.execute_command("PEXPIRE", name, milliseconds))

    def expire(self, name: Any, seconds: int) -> bool:
        return bool(self.execute_command("EXPIRE", name, seconds))

    def persist(self, name: Any) -> bool:
        return bool(self.execute_command("PERSIST", name))

    def mset(self, mapping: dict[Any, Any]) -> bool:
        self.execute_command("MSET", *(word for pair in mapping.items() for word in pair))
        return True

    def pttl(self, name: Any) -> int:
        return int(self.execute_command("PTTL", name))

    def ttl(self, name: Any) -> int:
        return int(self.execute_command("TTL", name))

    def keys(self, pattern: Any = "*") -> list[bytes]:
        found: list[bytes] = self.execute_command("KEYS", pattern)
        return found

    def scan(self, cursor: int = 0, match: Any = None, count: int | None = None) -> tuple[int, list[bytes]]:
        words: list[Any] = ["SCAN", cursor]
        if match is not None:
            words += ["MATCH", match]
        if count is not None:
            words += ["COUNT", count]
        following, found = self.execute_command(*words)
        return int(following), found

    def scan_iter(self, match: Any = None, count: int | None = None) -> Iterator[bytes]:
        """Every key (matching ``match``), a page of ``count`` at a time."""
        cursor = None
        while cursor != 0:
            cursor, found = self.scan(cursor or 0, match, count)
            yield from found

    def dbsize(self) -> int:
        return int(self.execute_command("DBSIZE"))

    def dump(self, name: Any) -> bytes | None:
        """An opaque snapshot of a value (see :meth:`Keyspace.dump`)."""
        value: bytes | None = self.execute_command("DUMP", name)
        return value

    def flushall(self, asynchronous: bool = False) -> bool:
        self.execute_command("FLUSHALL")
        return True

    def flushdb(self, asynchronous: bool = False) -> bool:
        self.execute_command("FLUSHDB")
        return True

    def ping(self) -> bool:
        self.execute_command("PING")
        return True

    def hgetall(self, name: Any) -> dict[bytes, bytes]:
        flat = self.execute_command("HGETALL", name)
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def xadd(
        self,
        name: Any,
        fields: dict[Any, Any],
        id: Any = "*",
        maxlen: int | None = None,
        approximate: bool = True,
        nomkstream: bool = False,
    ) -> bytes | None:
        words: list[Any] = ["XADD", name]
        if nomkstream:
            words.append("NOMKSTREAM")
        if maxlen is not None:
            words += ["MAXLEN", "~" if approximate else "=", maxlen]
        words.append(id)
        for pair in fields.items():
            words += pair
        reply: bytes | None = self.execute_command(*words)
        return reply

    def xrange(self, name: Any, min: Any = "-", max: Any = "+", count: int | None = None) -> list[Any]:
        return _entries(self.execute_command("XRANGE", name, min, max, *_count(count)))

    def xrevrange(self, name: Any, max: Any = "+", min: Any = "-", count: int | None = None) -> list[Any]:
        return _entries(self.execute_command("XREVRANGE", name, max, min, *_count(count)))

    def xlen(self, name: Any) -> int:
        return int(self.execute_command("XLEN", name))

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> EmbeddedPipeline:
        """A pipeline: its commands run one by one when executed (each
        atomic, the whole not, as a pipeline without MULTI)."""
        return EmbeddedPipeline(self)

    def close(self) -> None:
        """Nothing to close: the keyspace lives as long as the client."""


def _count(count: int | None) -> list[Any]:
    return [] if count is None else ["COUNT", count]


def _entries(raw: list[Any]) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Stream entries as redis-py gives them: (ID, fields) pairs."""
    return [(entry_id, dict(zip(flat[::2], flat[1::2], strict=True))) for entry_id, flat in raw]


class EmbeddedPipeline:
    """The commands of a pipeline, queued, then run one by one."""

    def __init__(self, client: EmbeddedRedis) -> None:
        self.client = client
        self.commands: list[tuple[Any, ...]] = []

    def __enter__(self) -> EmbeddedPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.commands.clear()

    def execute_command(self, *args: Any, **options: Any) -> EmbeddedPipeline:
        self.commands.append(args)
        return self

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Each command's reply, or its error in its place; the first
        error is raised instead if ``raise_on_error``."""
        results: list[Any] = []
        for args in self.commands:
            try:
                results.append(self.client.execute_command(*args))
            except redis.RedisError as error:
                results.append(error)
        self.commands.clear()
        if raise_on_error:
            for result in results:
                if isinstance(result, Exception):
                    raise result
        return results
