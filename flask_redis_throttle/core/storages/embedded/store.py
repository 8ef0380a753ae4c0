"""The keyspace's state: keys and values, with millisecond expiry that is
lazy and swept, and the helpers every command uses to read and write them.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .values import WRONGTYPE, CommandError, ZSet

_T = TypeVar("_T")

#: How many expired keys each call may delete at most, beyond the ones it
#: reads: more than any script writes, so the sweep keeps pace with any
#: stream of new keys, and little enough that no request pays for a large
#: expiry at once.
SWEEP = 64

#: How many SCAN cursors are remembered: an iteration left unfinished is
#: forgotten after this many more have started.
CURSORS = 1024


class KeyspaceBase:
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
