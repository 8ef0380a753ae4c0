"""The embedded store's values and words: replies, errors, numbers and
glob patterns read as Redis reads them, sorted sets and streams."""

from __future__ import annotations

import math
import re
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import redis

_INT = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
INT64 = (-(2**63), 2**63 - 1)
_FLOAT = re.compile(rb"\s*[-+]?(?:inf|infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[-+]?[0-9]+)?)\Z", re.IGNORECASE)
MAX_SEQ = 2**64 - 1

NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
BAD_STREAM_ID = "ERR Invalid stream ID specified as stream command argument"


class Status(bytes):
    """A status reply (``+OK``): ``{ok = ...}`` to Lua, its bytes to a client."""


class CommandError(Exception):
    """An error reply; its text is ``str(error)``."""


def response_error(message: str) -> redis.RedisError:
    """redis-py's error for a server's reply, the ``ERR`` and ``NOSCRIPT`` codes
    taken off the text; any other (``WRONGTYPE``) stays."""
    code, _, rest = message.partition(" ")
    if code == "NOSCRIPT":
        return redis.exceptions.NoScriptError(rest)
    return redis.ResponseError(rest if code == "ERR" else message)


OK = Status(b"OK")


def parse_integer(value: bytes, error: str = NOT_INTEGER) -> int:
    if _INT.match(value):
        number = int(value)
        if INT64[0] <= number <= INT64[1]:
            return number
    raise CommandError(error)


def parse_float(value: bytes) -> float:
    """Not after a space, nor past what a double holds (``1e400``, ``1e-400``)."""
    if not _FLOAT.match(value) or value[:1].isspace():
        raise CommandError(NOT_FLOAT)
    number = float(value)
    mantissa = value.lower().partition(b"e")[0]
    if (math.isinf(number) and b"inf" not in mantissa) or (number == 0 and re.search(rb"[1-9]", mantissa)):
        raise CommandError(NOT_FLOAT)
    return number


def format_score(score: float) -> bytes:
    if score.is_integer() and abs(score) < 1e17:  # never true of a NaN or an infinity
        return b"%d" % int(score)
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    return b"%.17g" % score


def parse_bound(value: bytes) -> tuple[float, bool]:
    """A score bound and whether it is exclusive; read by ``strtod``, which
    skips leading spaces and takes a number past a double as infinity or 0."""
    exclusive = value.startswith(b"(")
    text = value[1:] if exclusive else value
    if not _FLOAT.match(text):
        raise CommandError("ERR min or max is not a float")
    return float(text), exclusive


#: A glob pattern's parts: an escaped character, ``*``, ``?``, a class (an
#: open one runs to the end, as in Redis), any other character; and a class's.
_GLOB = re.compile(rb"\\(.)|(\*)|(\?)|\[(\^?)((?:\\.|[^\]\\]-.|[^\]])*)\]?|(.)", re.DOTALL)
_CLASS = re.compile(rb"\\(.)|([^\\])-(.)|(.)", re.DOTALL)


@lru_cache(maxsize=256)
def glob(pattern: bytes) -> Callable[[bytes], Any] | None:
    """A Redis glob pattern's matcher; None for ``*``."""
    if pattern == b"*":
        return None
    return re.compile(_GLOB.sub(_glob_part, pattern) + rb"\Z", re.DOTALL).match


def _glob_part(part: re.Match[bytes]) -> bytes:
    escaped, star, question, negate, body, char = part.groups()
    if star or question:
        return b".*" if star else b"."
    if negate is None:
        return re.escape(escaped or char)
    if not body:  # matches no character, or any one if negated
        return b"[\\s\\S]" if negate else b"[^\\s\\S]"
    return b"[" + negate + b"".join(map(_class_part, _CLASS.finditer(body))) + b"]"


def _class_part(part: re.Match[bytes]) -> bytes:
    escaped, low, high, char = part.groups()
    if low is None:
        return re.escape(escaped or char)
    low, high = sorted((low, high))
    return re.escape(low) + b"-" + re.escape(high)


@dataclass(slots=True)
class ZSet:
    """Each member's score, and (score, member) pairs in Redis's order."""

    scores: dict[bytes, float] = field(default_factory=dict)
    items: list[tuple[float, bytes]] = field(default_factory=list)

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
        start = self._first(low[0], after=low[1])
        stop = self._first(high[0], after=not high[1])
        return start, max(start, stop)

    def _first(self, score: float, after: bool) -> int:
        """The first item at least ``score`` (above it if ``after``): a
        one-item tuple sorts before every item of its score."""
        if after:
            if score == math.inf:
                return len(self.items)
            score = math.nextafter(score, math.inf)
        return bisect_left(self.items, (score,))


@dataclass(slots=True)
class Stream:
    """Entries in ID order, each ``(ms, seq)`` and its flat fields; the last ID given."""

    entries: list[tuple[tuple[int, int], list[bytes]]] = field(default_factory=list)
    last: tuple[int, int] = (0, 0)


def parse_stream_id(value: bytes, default_seq: int, exclusive_ok: bool = True) -> tuple[tuple[int, int], bool]:
    """An ID bound of XRANGE (``-``, ``+``, ``ms``, ``ms-seq``, maybe after ``(``) and whether it is exclusive."""
    exclusive = exclusive_ok and value.startswith(b"(")
    text = value[1:] if exclusive else value
    if text == b"-":
        return (0, 0), exclusive
    if text == b"+":
        return (MAX_SEQ, MAX_SEQ), exclusive
    ms, dash, seq = text.partition(b"-")
    if not ms.isdigit() or (dash and not seq.isdigit()):
        raise CommandError(BAD_STREAM_ID)
    parsed = (int(ms), int(seq) if dash else default_seq)
    if max(parsed) > MAX_SEQ:
        raise CommandError(BAD_STREAM_ID)
    return parsed, exclusive
