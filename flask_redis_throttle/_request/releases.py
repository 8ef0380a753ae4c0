"""Concurrency slots whose giving back failed, given back in the background
once the storage answers again.

A request gives its slots back when it ends (see
:meth:`~flask_redis_throttle._request.state.RateLimitState.release`). When the
storage cannot answer that call (stalled, restarting, its breaker open),
the slots would stay held until their lease ends, 60 seconds by default:
every capped client of the process locked out for a lease by an outage of
a second. Instead, each such :class:`~flask_redis_throttle.core.engine.throttle.Hold`
waits here, and one background thread of the app's tries them again until
the storage answers, so that a stall costs its clients the stall.

No request waits for it: the thread calls the storage past the circuit
breakers (a request's call is held back by an open one, and this one would
be too, for as long as the breaker's back-off, long after the storage is
back), and tells them nothing. It is bounded: at most :data:`MOST_PENDING`
holds wait, the oldest left to its lease past that; a hold whose lease has
ended is dropped, since the storage has freed its slots by then; and the
thread pauses between failed tries, twice as long each time up to
:data:`LONGEST_PAUSE`. It ends when nothing is left to give back, and starts
again when something is.

A call that timed out may have reached the storage, which then runs it
(a stalled server runs what it was sent once it resumes): trying it again
gives back nothing more, since each request's slots are found by its own
token. An *admission* that timed out is such a call too: answered without
its slots, it takes them when the storage runs it, for a request that has
ended; so its slots wait here as well (see
:attr:`~flask_redis_throttle.core.engine.throttle.Throttle.strays`). Given back
before the admission ran, they leave a tombstone that makes it take none.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..core.engine.throttle import Hold, StorageUnavailable, UnexpectedError

#: How many holds wait to be given back, at most, in one app of a process:
#: past it, the oldest is left to its lease.
MOST_PENDING = 10_000
#: The pause after the first failed try, in seconds; it doubles with each
#: failure in a row, up to :data:`LONGEST_PAUSE`.
FIRST_PAUSE = 0.05
#: The longest pause between two tries: once the storage answers again, the
#: slots are back within this (and one call's timeout).
LONGEST_PAUSE = 1.0

#: Told of a hold that will not be given back, and why: its failure and what follows.
Failed = Callable[[StorageUnavailable, str], None]


class Releases:
    """The holds of one app whose giving back failed, and the thread that
    gives them back.

    :param failed: told of a hold left to its lease: an error that is not
        the storage's (a bug: trying again would not help), or the oldest
        hold dropped when :data:`MOST_PENDING` wait.
    :param clock: seconds on a monotonic clock, for the holds' leases.
    """

    def __init__(self, failed: Failed, clock: Callable[[], float] = time.monotonic) -> None:
        self.failed = failed
        self.clock = clock
        self._lock = threading.Lock()
        #: Each hold that waits, and when its lease has ended at the latest
        #: (on :attr:`clock`: its lease counted from now, which is after its
        #: admission).
        self._pending: deque[tuple[Hold, float]] = deque()
        self._thread: threading.Thread | None = None
        #: Set whenever nothing waits (for tests, and whoever must know).
        self.idle = threading.Event()
        self.idle.set()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, hold: Hold) -> None:
        """Give ``hold`` back in the background, once the storage answers,
        or until its lease ends. It never blocks for the storage."""
        dropped = None
        with self._lock:
            if len(self._pending) >= MOST_PENDING:
                dropped = self._pending.popleft()[0]
            self._pending.append((hold, self.clock() + hold.lease))
            self.idle.clear()
            # A thread of the parent's is not alive in a forked worker.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="flask-redis-throttle releases", daemon=True)
                self._thread.start()
        if dropped is not None:
            failure = StorageUnavailable(f"{dropped.throttle.url}: {MOST_PENDING} concurrency slots wait already")
            self.failed(failure, "the oldest is freed by its lease")

    def _run(self) -> None:
        """Try each hold in turn until none is left: one that fails goes to
        the back, so that a node that does not answer holds up no other's."""
        pause = FIRST_PAUSE
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    self.idle.set()
                    return
                hold, ends = self._pending.popleft()
            if ends <= self.clock():
                continue  # its lease has freed it
            try:
                hold.release(guarded=False)
            except UnexpectedError as error:
                self.failed(error, "a concurrency slot is freed by its lease")
            except StorageUnavailable:
                with self._lock:
                    self._pending.append((hold, ends))
                time.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE)
            else:
                pause = FIRST_PAUSE
