"""Concurrency slots whose giving back failed, given back by one thread per app once the storage
answers, so that a stall costs its clients the stall, not a lease (see :ref:`concurrency`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..core.engine.throttle import Hold, StorageUnavailable, UnexpectedError

#: How many holds wait, at most, in one app of a process: past it, the oldest is left to its lease.
MOST_PENDING = 10_000
#: The pauses after failed tries, in seconds: the first, doubled with each failure up to the longest.
FIRST_PAUSE, LONGEST_PAUSE = 0.05, 1.0

#: Told of a hold that will not be given back, and why: its failure and what follows.
Failed = Callable[[StorageUnavailable, str], None]


class Releases:
    """``failed`` is told of a hold left to its lease (after a bug, or the oldest of :data:`MOST_PENDING`)."""

    def __init__(self, failed: Failed, clock: Callable[[], float] = time.monotonic) -> None:
        self.failed = failed
        self.clock = clock
        self._lock = threading.Lock()
        #: Each hold that waits, and when its lease has ended at the latest (counted from now).
        self._pending: deque[tuple[Hold, float]] = deque()
        self._thread: threading.Thread | None = None
        #: Set whenever nothing waits (for tests, and whoever must know).
        self.idle = threading.Event()
        self.idle.set()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, hold: Hold) -> None:
        """Give ``hold`` back in the background, once the storage answers or its lease ends."""
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
        """Try each hold in turn; one that fails goes to the back: a silent node holds up no other's."""
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
