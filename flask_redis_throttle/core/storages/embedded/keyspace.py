"""The keyspace: keys and values with millisecond expiry (lazy, and swept),
and the commands our code sends, with Redis's replies and errors."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from .values import (
    BAD_STREAM_ID,
    INT64,
    MAX_SEQ,
    OK,
    CommandError,
    Status,
    Stream,
    ZSet,
    format_score,
    glob,
    parse_bound,
    parse_float,
    parse_integer,
    parse_stream_id,
)

_T = TypeVar("_T")
_M = TypeVar("_M")

#: How many expired keys each call may delete besides those it reads: more than
#: any script writes, so the sweep keeps pace, and no request pays for a large expiry.
SWEEP = 64

#: How many SCAN cursors are remembered.
CURSORS = 1024

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
SYNTAX = "ERR syntax error"
OVERFLOW = "ERR increment or decrement would overflow"
TYPE_NAMES: dict[type, bytes] = {bytes: b"string", dict: b"hash", ZSet: b"zset", Stream: b"stream"}
#: SET's expiry options: the deadline is base * now + scale * amount, in ms.
EXPIRY_OPTIONS = {b"EX": (1000, 1), b"PX": (1, 1), b"EXAT": (1000, 0), b"PXAT": (1, 0)}


class Keyspace:
    """Each command method takes one command's words (name first) and returns its reply (bytes, an int, None
    for a nil, a list or a :class:`Status`) or raises a :class:`CommandError`; :class:`EmbeddedRedis` locks."""

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
        #: The time, in ms, every command of a call is judged at: frozen for a script, as in Redis.
        self.now = 0

    def tick(self) -> None:
        self.now = int(self.clock() * 1000)
        current, budget = self.now // 1000, SWEEP
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
        """Give ``key`` a deadline; one already reached deletes it."""
        if deadline <= self.now:
            self.remove(key)
            return
        self._unexpire(key)
        self.expires[key] = deadline
        second = deadline // 1000
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = set()
            heapq.heappush(self._seconds, second)
        bucket.add(key)

    def remove(self, key: bytes) -> bool:
        if self.data.pop(key, None) is None:
            return False
        self._unexpire(key)
        return True

    def lookup(self, key: bytes) -> Any:
        """None for a key missing or past its deadline (deleted then), as in Redis."""
        value = self.data.get(key)
        if value is not None:
            deadline = self.expires.get(key)
            if deadline is not None and deadline < self.now:
                self.remove(key)
                return None
        return value

    def typed(self, key: bytes, kind: type[_T]) -> _T | None:
        value = self.lookup(key)
        if value is not None and type(value) is not kind:
            raise CommandError(WRONGTYPE)
        return value

    def keys_alive(self) -> list[bytes]:
        now, expires = self.now, self.expires
        return [key for key in self.data if expires.get(key, now) >= now]

    def drop_if_empty(self, key: bytes, value: Any) -> None:
        if not (value.scores if type(value) is ZSet else value):
            self.remove(key)

    def del_(self, words: list[bytes]) -> int:
        return sum(self.lookup(key) is not None and self.remove(key) for key in words[1:])

    def exists(self, words: list[bytes]) -> int:
        return sum(self.lookup(key) is not None for key in words[1:])

    def type_(self, words: list[bytes]) -> Status:
        value = self.lookup(words[1])
        return Status(TYPE_NAMES.get(type(value), b"none"))

    def _expire(self, key: bytes, deadline: int) -> int:
        if self.lookup(key) is None:
            return 0
        self.expire_at(key, deadline)
        return 1

    def pexpire(self, words: list[bytes]) -> int:
        """An error, as Redis's, for a deadline past 64 bits of milliseconds."""
        name = words[0].decode("utf-8", "replace").lower()
        span = parse_integer(words[2]) * (1000 if name == "expire" else 1)
        if not INT64[0] <= span <= INT64[1] - self.now:
            raise CommandError(f"ERR invalid expire time in '{name}' command")
        return self._expire(words[1], self.now + span)

    def pexpireat(self, words: list[bytes]) -> int:
        return self._expire(words[1], parse_integer(words[2]))

    def persist(self, words: list[bytes]) -> int:
        if self.lookup(words[1]) is None or words[1] not in self.expires:
            return 0
        self._unexpire(words[1])
        return 1

    def pttl(self, words: list[bytes]) -> int:
        if self.lookup(words[1]) is None:
            return -2
        deadline = self.expires.get(words[1])
        left = -1 if deadline is None else deadline - self.now
        return left if left < 0 or words[0].upper() == b"PTTL" else (left + 500) // 1000

    def keys(self, words: list[bytes]) -> list[bytes]:
        match = glob(words[1])
        return [key for key in self.keys_alive() if match is None or match(key)]

    def scan(self, words: list[bytes]) -> list[Any]:
        """In byte order: a cursor stands for the last key it returned, so every key
        that lives through the scan is returned exactly once."""
        cursor = parse_integer(words[1], "ERR invalid cursor")
        if cursor < 0:
            raise CommandError("ERR invalid cursor")
        options = _options(words, 2, {b"MATCH": 1, b"COUNT": 1})
        match = glob(options[b"MATCH"][0]) if b"MATCH" in options else None
        count = parse_integer(options[b"COUNT"][0]) if b"COUNT" in options else 10
        if count < 1:
            raise CommandError(SYNTAX)
        # An unknown (too old) cursor starts again: keys may come twice, as Redis allows, none is missed.
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
        return [following, [key for key in page if self.lookup(key) is not None and (match is None or match(key))]]

    def dump(self, words: list[bytes]) -> bytes | None:
        """An opaque snapshot, for telling whether a value changed: no RESTORE takes it."""
        value = self.lookup(words[1])
        return None if value is None else b"embedded:" + repr(value).encode()

    def dbsize(self, words: list[bytes]) -> int:
        return len(self.keys_alive())

    def flushall(self, words: list[bytes]) -> Status:
        if len(words) > 1 and words[1].upper() not in (b"SYNC", b"ASYNC"):
            raise CommandError(SYNTAX)
        for part in (self.data, self.expires, self._buckets, self._seconds):
            part.clear()
        return OK

    def ping(self, words: list[bytes]) -> Status:
        return Status(b"PONG")

    def time_(self, words: list[bytes]) -> list[bytes]:
        micros = int(self.clock() * 1_000_000)
        return [b"%d" % (micros // 1_000_000), b"%d" % (micros % 1_000_000)]

    def get(self, words: list[bytes]) -> bytes | None:
        return self.typed(words[1], bytes)

    def set(self, words: list[bytes]) -> Any:
        """As in Redis, a repeated option's last one wins, and the expiry is read after all."""
        key, options = words[1], _options(words, 3, SET_OPTIONS)
        expiry = options.keys() & SET_EXPIRY
        nx, xx, get = b"NX" in options, b"XX" in options, b"GET" in options
        if (nx and xx) or len(expiry) > 1:
            raise CommandError(SYNTAX)
        deadline = None
        if expiry and b"KEEPTTL" not in expiry:
            (option,) = expiry
            amount = parse_integer(options[option][0])
            scale, base = EXPIRY_OPTIONS[option]
            if not 0 < scale * amount <= INT64[1] - base * self.now:
                raise CommandError("ERR invalid expire time in 'set' command")
            deadline = base * self.now + scale * amount
        old = self.typed(key, bytes) if get else self.lookup(key)
        if (nx and old is not None) or (xx and old is None):
            return old if get else None
        self.data[key] = words[2]
        if deadline is not None:
            self.expire_at(key, deadline)
        elif not expiry:
            self._unexpire(key)
        return old if get else OK

    def mset(self, words: list[bytes]) -> Status:
        if len(words) % 2 == 0:
            raise arity_error(words[0])
        for i in range(1, len(words), 2):
            self._unexpire(words[i])
            self.data[words[i]] = words[i + 1]
        return OK

    def incrby(self, words: list[bytes]) -> int:
        old = self.typed(words[1], bytes)
        result = _added(0 if old is None else parse_integer(old), parse_integer(words[2]) if len(words) > 2 else 1)
        self.data[words[1]] = b"%d" % result
        return result

    def hmget(self, words: list[bytes]) -> list[bytes | None]:
        fields = self.typed(words[1], dict) or {}
        return [fields.get(name) for name in words[2:]]

    def hget(self, words: list[bytes]) -> bytes | None:
        return self.hmget(words)[0]

    def hgetall(self, words: list[bytes]) -> list[bytes]:
        fields = self.typed(words[1], dict) or {}
        return [part for pair in fields.items() for part in pair]

    def hlen(self, words: list[bytes]) -> int:
        return len(self.typed(words[1], dict) or ())

    def hset(self, words: list[bytes]) -> int:
        if len(words) % 2:
            raise arity_error(words[0])
        fields = self.data[words[1]] = self.typed(words[1], dict) or {}
        added = 0
        for i in range(2, len(words), 2):
            added += words[i] not in fields
            fields[words[i]] = words[i + 1]
        return added

    def hincrby(self, words: list[bytes]) -> int:
        by = parse_integer(words[3])
        fields = self.typed(words[1], dict) or {}
        result = _added(parse_integer(fields.get(words[2], b"0"), "ERR hash value is not an integer"), by)
        fields[words[2]] = b"%d" % result
        self.data[words[1]] = fields
        return result

    def hdel(self, words: list[bytes]) -> int:
        fields = self.typed(words[1], dict)
        if fields is None:
            return 0
        removed = sum(fields.pop(name, None) is not None for name in words[2:])
        self.drop_if_empty(words[1], fields)
        return removed

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
        scores = [parse_float(score) for score in pairs[::2]]
        zset = self.typed(words[1], ZSet)
        if zset is None:
            if b"XX" in flags:
                return None if b"INCR" in flags else 0
            zset = self.data[words[1]] = ZSet()
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

    def _scored(self, words: list[bytes]) -> tuple[ZSet | None, int, int]:
        """The sorted set of ``key min max`` words, and its items' span in that range."""
        low, high = parse_bound(words[2]), parse_bound(words[3])
        zset = self.typed(words[1], ZSet)
        return (zset, *zset.span(low, high)) if zset is not None else (None, 0, 0)

    def zcount(self, words: list[bytes]) -> int:
        _, start, stop = self._scored(words)
        return stop - start

    def zrange(self, words: list[bytes]) -> list[bytes]:
        start, stop = parse_integer(words[2]), parse_integer(words[3])
        scores = b"WITHSCORES" in _options(words, 4, {b"WITHSCORES": 0})
        zset = self.typed(words[1], ZSet)
        if zset is None:
            return []
        size = len(zset.items)
        start = max(start + size if start < 0 else start, 0)
        stop = stop + size if stop < 0 else stop
        if start > stop or start >= size:
            return []
        return reply_members(zset.items[start : min(stop, size - 1) + 1], scores)

    def zrangebyscore(self, words: list[bytes]) -> list[bytes]:
        low, high = parse_bound(words[2]), parse_bound(words[3])
        options = _options(words, 4, {b"WITHSCORES": 0, b"LIMIT": 2})
        offset, count = (parse_integer(word) for word in options.get(b"LIMIT", (b"0", b"-1")))
        zset = self.typed(words[1], ZSet)
        if zset is None or offset < 0:
            return []
        start, stop = zset.span(low, high)
        start += offset
        if count >= 0:
            stop = min(stop, start + count)
        return reply_members(zset.items[start:stop], b"WITHSCORES" in options)

    def zrem(self, words: list[bytes]) -> int:
        zset = self.typed(words[1], ZSet)
        if zset is None:
            return 0
        removed = sum(zset.remove(member) for member in words[2:])
        self.drop_if_empty(words[1], zset)
        return removed

    def zremrangebyscore(self, words: list[bytes]) -> int:
        zset, start, stop = self._scored(words)
        if zset is None:
            return 0
        for _, member in zset.items[start:stop]:
            del zset.scores[member]
        del zset.items[start:stop]
        self.drop_if_empty(words[1], zset)
        return stop - start

    def xadd(self, words: list[bytes]) -> bytes | None:
        key, i = words[1], 2
        make, maxlen = True, None
        while i < len(words):
            option = words[i].upper()
            if option == b"NOMKSTREAM":
                make = False
            elif option == b"MAXLEN":
                i += 2 if words[i + 1 : i + 2] in ([b"="], [b"~"]) else 1
                if i >= len(words):
                    raise CommandError(SYNTAX)
                maxlen = parse_integer(words[i])
                if maxlen < 0:
                    raise CommandError("ERR The MAXLEN argument must be >= 0.")
            else:
                break
            i += 1
        if (len(words) - i - 1) < 2 or (len(words) - i - 1) % 2:
            raise arity_error(words[0])
        stream = self.typed(key, Stream)
        last, wanted = (0, 0) if stream is None else stream.last, words[i]
        if wanted == b"*":
            ms = max(self.now, last[0])
            entry_id = (ms, last[1] + 1 if ms == last[0] else 0)
        else:
            entry_id = parse_stream_id(wanted, 0, False)[0]
            if wanted in (b"-", b"+"):
                raise CommandError(BAD_STREAM_ID)
            if entry_id == (0, 0):
                raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
            if entry_id <= last:
                raise CommandError("ERR The ID specified in XADD is equal or smaller than the target stream top item")
        if stream is None:
            if not make:
                return None
            stream = self.data[key] = Stream()
        stream.entries.append((entry_id, list(words[i + 1 :])))
        stream.last = entry_id
        if maxlen is not None and len(stream.entries) > maxlen:
            del stream.entries[: len(stream.entries) - maxlen]
        return b"%d-%d" % entry_id

    def xrange(self, words: list[bytes]) -> list[Any]:
        reverse = words[0].upper() == b"XREVRANGE"
        key, low, high = words[1], words[3 if reverse else 2], words[2 if reverse else 3]
        start, start_ex = parse_stream_id(low, 0)
        end, end_ex = parse_stream_id(high, MAX_SEQ)
        options = _options(words, 4, {b"COUNT": 1})
        count = parse_integer(options[b"COUNT"][0]) if options else None
        stream = self.typed(key, Stream)
        if stream is None or (count is not None and count <= 0):
            return []
        found = [
            [b"%d-%d" % entry_id, list(fields)]
            for entry_id, fields in (reversed(stream.entries) if reverse else stream.entries)
            if (start < entry_id or (start == entry_id and not start_ex))
            and (entry_id < end or (entry_id == end and not end_ex))
        ]
        return found if count is None else found[:count]

    def xlen(self, words: list[bytes]) -> int:
        stream = self.typed(words[1], Stream)
        return 0 if stream is None else len(stream.entries)

    def execute(self, words: Sequence[bytes]) -> Any:
        return command(COMMANDS, words)(self, words if type(words) is list else list(words))


def command(table: dict[bytes, tuple[_M, int]], words: Sequence[bytes]) -> _M:
    """``table``'s method for the command ``words``, checked against its arity."""
    entry = table.get(words[0]) or table.get(bytes(words[0]).upper())
    if entry is None:
        shown = words[0].decode("utf-8", "replace")
        raise CommandError(f"ERR unknown command '{shown}', with args beginning with: ")
    method, arity = entry
    if (arity > 0 and len(words) != arity) or len(words) < -arity:
        raise arity_error(words[0])
    return method


#: SET's options and the count of words each takes.
SET_OPTIONS = {b"NX": 0, b"XX": 0, b"GET": 0, b"KEEPTTL": 0, **dict.fromkeys(EXPIRY_OPTIONS, 1)}
SET_EXPIRY = {*EXPIRY_OPTIONS, b"KEEPTTL"}


def _options(words: list[bytes], start: int, takes: dict[bytes, int]) -> dict[bytes, list[bytes]]:
    """The options from ``words[start]`` on, each a key of ``takes`` with the words it
    takes (a repeated one's last wins); else a syntax error."""
    found: dict[bytes, list[bytes]] = {}
    while start < len(words):
        option = words[start].upper()
        count = takes.get(option)
        if count is None or start + count >= len(words):
            raise CommandError(SYNTAX)
        found[option] = words[start + 1 : start + 1 + count]
        start += 1 + count
    return found


def arity_error(name: bytes) -> CommandError:
    return CommandError(f"ERR wrong number of arguments for '{name.decode('utf-8', 'replace').lower()}' command")


def reply_members(items: Iterable[tuple[float, bytes]], scores: bool) -> list[bytes]:
    if scores:
        return [part for score, member in items for part in (member, format_score(score))]
    return [member for _, member in items]


def _added(number: int, by: int) -> int:
    """``number + by``; an error past 64 bits."""
    if not INT64[0] <= number + by <= INT64[1]:
        raise CommandError(OVERFLOW)
    return number + by


#: Each command's Redis arity: the exact count of words, its name included, or at least -arity. Its method
#: is its name in lower case (with ``_`` after a Python name), or that of the command after its ``=``.
ARITIES = """
GET 2  SET -3  MSET -3  INCR=INCRBY 2  INCRBY 3  DEL -2  UNLINK=DEL -2  EXISTS -2  TYPE 2  PEXPIRE 3
EXPIRE=PEXPIRE 3  PEXPIREAT 3  PERSIST 2  PTTL 2  TTL=PTTL 2  KEYS 2  SCAN -2  DBSIZE 1  DUMP 2  FLUSHALL -1
FLUSHDB=FLUSHALL -1  PING 1  TIME 1  HGET 3  HMGET -3  HGETALL 2  HLEN 2  HSET -4  HINCRBY 4  HDEL -3  ZADD -4
ZCARD 2  ZSCORE 3  ZCOUNT 4  ZRANGE -4  ZRANGEBYSCORE -4  ZREM -3  ZREMRANGEBYSCORE 4  XADD -5  XRANGE -4
XREVRANGE=XRANGE -4  XLEN 2
"""


def _method(name: str) -> Callable[[Keyspace, list[bytes]], Any]:
    name = name.rpartition("=")[2].lower()
    method: Callable[[Keyspace, list[bytes]], Any] = getattr(Keyspace, name, None) or getattr(Keyspace, f"{name}_")
    return method


COMMANDS = {
    word.partition("=")[0].encode(): (_method(word), int(arity))
    for word, arity in zip(ARITIES.split()[::2], ARITIES.split()[1::2], strict=True)
}
