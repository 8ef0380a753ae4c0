"""The keyspace's commands on sorted sets and streams (the sliding log's
sets, and the refusal log's stream), each with Redis's replies and errors.
"""

from __future__ import annotations

from typing import Any

from .store import KeyspaceBase
from .values import (
    _MAX_SEQ,
    BAD_STREAM_ID,
    SYNTAX,
    CommandError,
    Stream,
    ZSet,
    _bound,
    _float,
    _format_id,
    _integer,
    _members,
    _stream_id,
    format_score,
)


class SortedSets(KeyspaceBase):
    """Commands on sorted sets."""

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


class Streams(KeyspaceBase):
    """Commands on streams."""

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
