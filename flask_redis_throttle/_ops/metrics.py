"""Prometheus metrics (:doc:`/operations`), incremented through cached children's value objects: ``labels()``
and ``inc()`` re-check their arguments and take as long as the rest (``benchmarks/overhead.py --metrics``)."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: The values of the ``outcome`` label of ``ratelimit_decisions_total``.
OUTCOMES = (
    "admitted",  # Redis (or the block cache) let it through
    "refused",  # Redis refused it: a 429
    "shadow_refused",  # a shadow limit would have refused it: let through
    "blocked_in_process",  # the block cache refused it without asking Redis: a 429
    "fail_open",  # Redis was unavailable, and RATELIMIT_FAIL_OPEN let it through
    "fail_closed",  # Redis was unavailable: a 503
    "fallback",  # Redis was unavailable, and the in-process fallback decided it
    "internal_error",  # an error not Redis's (a bug): RATELIMIT_FAIL_OPEN answered it
)

#: The bounds of ``ratelimit_delay_seconds``'s buckets: a view's delay is at most 10 s (:doc:`/shaping`).
DELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: From a loopback round trip to the socket timeout (0.5 s by default) of a stalled Redis.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

_INSTALL_HINT = 'RateLimit(metrics=...) needs prometheus_client: pip install "flask-redis-throttle[prometheus]"'


class Metrics:
    """Made once per registry by :func:`metrics_for`: a registry refuses a name twice, and apps may share one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram  # metrics_for() checked it is installed

        counter, histogram = partial(Counter, registry=registry), partial(Histogram, registry=registry)
        self.decisions = counter(
            "ratelimit_decisions",
            "Rate limit decisions, by endpoint, scope of the deciding limit, and outcome.",
            ("endpoint", "scope", "outcome"),
        )
        self.seconds = histogram(
            "ratelimit_decision_seconds",
            "Time spent deciding a request's rate limits, storage round trips included.",
            buckets=BUCKETS,
        )
        up = "1 while the circuit breaker of the node is closed, 0 while it is open."
        self.storage_up = Gauge("ratelimit_storage_up", up, ("node",), registry=registry, multiprocess_mode="livemin")
        self.near_limits = counter(
            "ratelimit_near_limit",
            "Identities that passed RATELIMIT_NEAR_LIMIT of a layer, by endpoint and scope of the limit.",
            ("endpoint", "scope"),
        )
        self.delays = counter(
            "ratelimit_delayed", "Requests a shaped limit let wait for their turn, by endpoint.", ("endpoint",)
        )
        self.delay_seconds = histogram(
            "ratelimit_delay_seconds", "Time shaped requests waited for their turn.", buckets=DELAY_BUCKETS
        )
        #: Each label set's increment: endpoints x scopes x 8 outcomes, bounded as the plans.
        self._count: dict[tuple[str, str, str], Callable[[float], None]] = {}
        self._observe = _fast_observe(self.seconds) or self.seconds.observe

    def decided(self, endpoint: str, scope: str, outcome: str, seconds: float) -> None:
        key = (endpoint, scope, outcome)
        count = self._count.get(key)
        if count is None:
            child = self.decisions.labels(endpoint, scope, outcome)
            count = self._count[key] = _fast_inc(child) or child.inc
        count(1)
        self._observe(seconds)

    def near_limit(self, endpoint: str, scope: str) -> None:
        self.near_limits.labels(endpoint, scope).inc()

    def delayed(self, endpoint: str, seconds: float) -> None:
        self.delays.labels(endpoint).inc()
        self.delay_seconds.observe(seconds)

    def node(self, name: str, up: bool) -> None:
        self.storage_up.labels(name).set(1 if up else 0)


def _fast_inc(counter: Any) -> Callable[[float], None] | None:
    """The ``inc`` of ``counter``'s value object (in-process or multiprocess), or None."""
    inc = getattr(getattr(counter, "_value", None), "inc", None)
    return inc if callable(inc) else None


def _fast_observe(histogram: Any) -> Callable[[float], None] | None:
    """``histogram.observe`` without its checks, or None; its buckets are not cumulative (the exporter sums them)."""
    total = getattr(histogram, "_sum", None)
    buckets = getattr(histogram, "_buckets", None)
    bounds = getattr(histogram, "_upper_bounds", None)
    if not callable(getattr(total, "inc", None)) or not isinstance(buckets, list) or not isinstance(bounds, list):
        return None
    if len(buckets) != len(bounds) or bounds[-1] != float("inf"):
        return None
    add = total.inc  # type: ignore[union-attr]
    incs = [bucket.inc for bucket in buckets]
    frozen = tuple(bounds)

    def observe(amount: float) -> None:
        add(amount)
        incs[bisect_left(frozen, amount)](1)

    return observe


_lock = threading.Lock()
#: The metrics of each registry (a registry is equal only to itself).
_registered: dict[CollectorRegistry, Metrics] = {}


def metrics_for(registry: CollectorRegistry | None) -> Metrics:
    """The metrics of ``registry`` (the default if None); an :class:`ImportError` naming the extra without it."""
    try:
        import prometheus_client
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error
    if registry is None:
        registry = prometheus_client.REGISTRY
    if not isinstance(registry, prometheus_client.CollectorRegistry):
        raise TypeError(f"metrics={registry!r} must be True, False or a prometheus_client.CollectorRegistry")
    with _lock:
        found = _registered.get(registry)
        if found is None:
            found = _registered[registry] = Metrics(registry)
        return found
