"""What the extension logs about itself: spaced-out warnings, outages, the start-up line, the breakers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._request.config import Settings
    from ..core.engine.throttle import Throttle
    from .metrics import Metrics

logger = logging.getLogger("flask_redis_throttle")
#: A logger of its own, for operators to route or silence apart.
breaker_logger = logging.getLogger("flask_redis_throttle.breaker")

#: The shortest gap between two warnings of one kind, in seconds.
WARNING_INTERVAL = 10.0

#: The attribute set on the record of an internal error.
INTERNAL_ERROR = "ratelimit_internal_error"

_NOUNS = {logging.WARNING: "warning", logging.ERROR: "error"}

#: The kinds of warning that an outage of Redis causes; recovery resets their counts.
_OUTAGE_WARNINGS = frozenset(["storage", "refusal log"])


class Notices:
    """The warnings and notices of one app's state; its subclass sets the attributes below."""

    #: The monotonic clock that spaces warnings; tests may replace it.
    clock: Callable[[], float] = staticmethod(time.monotonic)

    settings: Settings
    throttle: Throttle | None
    metrics: Metrics | None
    limited_endpoints: Callable[[], set[str]]

    def __init__(self) -> None:
        self._warning_lock = threading.Lock()
        #: Per kind: when it may be logged again, and how many were left out.
        self._warnings: dict[str, tuple[float, int]] = {}
        self._failing = False  # since Redis last decided
        self._failed_requests = 0
        self._announced = False

    def _outage(self, message: str) -> None:
        with self._warning_lock:
            self._failing = True
            self._failed_requests += 1
        self._warn(message)

    def _recovered(self) -> None:
        """Log a recovery once, keeping the next warning's time: a flapping Redis still warns once per interval."""
        with self._warning_lock:
            if not self._failing:
                return  # another thread logged it
            failed, self._failing, self._failed_requests = self._failed_requests, False, 0
            for kind, (next_warning, _unwarned) in self._warnings.items():
                if kind in _OUTAGE_WARNINGS:
                    self._warnings[kind] = (next_warning, 0)
        assert self.throttle is not None
        logger.info(
            "rate limit storage %s recovered: it decides requests again, after failing %d", self.throttle.url, failed
        )

    def _warn(
        self,
        message: str,
        kind: str = "storage",
        exc_info: BaseException | None = None,
        level: int = logging.WARNING,
        extra: dict[str, object] | None = None,
    ) -> None:
        """Log at most once per :data:`WARNING_INTERVAL` per kind, with how many were left out since."""
        with self._warning_lock:
            now = self.clock()
            next_warning, unwarned = self._warnings.get(kind, (0.0, 0))
            if now < next_warning:
                self._warnings[kind] = (next_warning, unwarned + 1)
                return
            self._warnings[kind] = (now + WARNING_INTERVAL, 0)
        if unwarned:
            message = f"{message}. {unwarned} similar {_NOUNS[level]}(s) were not logged since the last one"
        logger.log(level, "%s.", message, exc_info=exc_info, extra=extra)

    def _internal_error(self, message: str, error: BaseException) -> None:
        """Log a bug at ERROR, spaced out as warnings, marked :data:`INTERNAL_ERROR` for the tests."""
        self._warn(message, "internal error", error, logging.ERROR, {INTERNAL_ERROR: True})

    def skip_announcement(self) -> None:
        """No start-up line, as Flask-Limiter (for the shim's apps)."""
        self._announced = True

    def announce(self) -> None:
        """Log the start-up line at the first request, so that views registered after ``init_app`` count."""
        with self._warning_lock:
            if self._announced:
                return
            self._announced = True
        settings = self.settings
        where = self.throttle.url if self.throttle is not None else "none (RATELIMIT_ENABLED is False)"
        try:
            endpoints = str(len(self.limited_endpoints()))
        except Exception:  # a bad limit: its own endpoint's requests will say what is wrong
            endpoints = "an unknown number of"
        logger.info(
            "flask-redis-throttle: storage %s, strategy %s, %s limited endpoint(s); %s when the storage is unavailable",
            where,
            settings.strategy,
            endpoints,
            "fallback in memory" if settings.fallback else "fail open" if settings.fail_open else "fail closed (503)",
        )

    def breaker_added(self, name: str) -> None:
        self._node(name, True)

    def breaker_opened(self, name: str, failures: int, period: float) -> None:
        message = (
            "circuit breaker opened for %s after %d failure(s) in a row: not calling it for %.1f s, then probing it"
        )
        breaker_logger.warning(message, name, failures, period)
        self._node(name, False)

    def breaker_closed(self, name: str, failures: int) -> None:
        breaker_logger.info(
            "circuit breaker closed for %s: it answered a probe after %d failure(s) in a row", name, failures
        )
        self._node(name, True)

    def _node(self, name: str, up: bool) -> None:
        if self.metrics is not None:
            self.metrics.node(name, up)
