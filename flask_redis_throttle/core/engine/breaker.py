"""A circuit breaker: stop calling a Redis that keeps failing, so that the
failure policy decides at once rather than after a timeout, then probe it.
It imports neither Flask nor Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol


class BreakerListener(Protocol):
    """Told, outside the breaker's lock, when a breaker is added, opens (for
    ``period`` seconds before the first probe) and closes: to log and count."""

    def breaker_added(self, name: str) -> None: ...

    def breaker_opened(self, name: str, failures: int, period: float) -> None: ...

    def breaker_closed(self, name: str, failures: int) -> None: ...


@dataclass(eq=False)
class CircuitBreaker:
    """Counts failures in a row: ``threshold`` open it, then after a back-off
    one request probes Redis; success closes it, failure reopens it for
    twice as long, up to ``max_backoff``.

    :param threshold: failures in a row that open the breaker; at least 1.
    :param backoff: seconds it first stays open.
    :param max_backoff: the longest it stays open.
    :param clock: seconds on a monotonic clock; tests may replace it.
    :param name: the node it guards, for the listener: a redacted URL or ``host:port``.
    :param listener: told when it opens and closes; None for no one.
    """

    threshold: int = 3
    backoff: float = 1.0
    max_backoff: float = 30.0
    clock: Callable[[], float] = time.monotonic
    name: str = ""
    listener: BreakerListener | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _failures: int = field(default=0, init=False)
    #: When the breaker may next let a probe through; 0 while closed.
    _open_until: float = field(default=0.0, init=False)
    _period: float = field(default=0.0, init=False)
    _probing: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.threshold < 1 or self.backoff <= 0 or self.max_backoff < self.backoff:
            raise ValueError("need threshold >= 1 and 0 < backoff <= max_backoff")
        self._period = self.backoff

    def like(self, name: str = "") -> CircuitBreaker:
        """A closed breaker like this one, for a cluster node: a dead node stops no calls to others."""
        breaker = replace(self, name=name)
        if self.listener is not None:
            self.listener.breaker_added(name)
        return breaker

    @property
    def open(self) -> bool:
        """Whether calls are being held back (a probe may be in flight)."""
        return self._open_until > 0

    def retry_in(self) -> float:
        """Seconds until the next probe may be made; 0 if calls are allowed."""
        return max(self._open_until - self.clock(), 0.0) if self._open_until else 0.0

    def allow(self) -> bool:
        """Whether to call Redis now: while closed (taking no lock), and for the one probe once the period is over."""
        if not self._open_until:
            return True
        with self._lock:
            if self._open_until and (self._probing or self.clock() < self._open_until):
                return False
            self._probing = bool(self._open_until)
            return True

    def abandon(self) -> None:
        """The call :meth:`allow` let through is not made: another request may probe instead."""
        if self._probing:
            with self._lock:
                self._probing = False

    def success(self) -> None:
        """Redis answered: close the breaker, telling the listener if it was open."""
        if self._failures or self._open_until:
            with self._lock:
                failures, was_open = self._failures, bool(self._open_until)
                self._failures, self._open_until, self._period, self._probing = 0, 0.0, self.backoff, False
            if was_open and self.listener is not None:
                self.listener.breaker_closed(self.name, failures)

    def failure(self) -> None:
        """Redis failed: count it, and open (again) when it is time to; a failed probe tells no listener."""
        with self._lock:
            self._failures += 1
            opened = not self._open_until
            if self._probing:  # the probe failed: wait twice as long
                self._period = min(self._period * 2, self.max_backoff)
            elif self._open_until or self._failures < self.threshold:
                return
            self._probing = False
            self._open_until = self.clock() + self._period
            failures, period = self._failures, self._period
        if opened and self.listener is not None:
            self.listener.breaker_opened(self.name, failures, period)
