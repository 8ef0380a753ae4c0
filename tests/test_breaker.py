"""The circuit breaker and the in-memory fallback: while Redis is down,
requests pay no timeout, Redis is probed after a back-off, and limits can go
on being enforced per process."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
from flask import Flask
from helpers import FakeMonotonic, extension_records, get, install

from flask_redis_throttle import limit
from flask_redis_throttle.core.engine.breaker import CircuitBreaker
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import RedisServer


def test_breaker_opens_after_threshold_failures_in_a_row() -> None:
    clock = FakeMonotonic()
    breaker = CircuitBreaker(threshold=3, backoff=2.0, max_backoff=5.0, clock=clock)
    breaker.failure()
    breaker.failure()
    breaker.success()  # a success in between starts the count again
    breaker.failure()
    breaker.failure()
    assert breaker.allow()
    assert not breaker.open
    breaker.failure()
    assert breaker.open
    assert not breaker.allow()
    assert breaker.retry_in() == 2.0
    clock.now += 1.999
    assert not breaker.allow()


def test_after_the_backoff_one_probe_goes_and_its_outcome_decides() -> None:
    clock = FakeMonotonic()
    breaker = CircuitBreaker(threshold=1, backoff=2.0, max_backoff=5.0, clock=clock)
    breaker.failure()
    clock.now += 2.0
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # others do not wait for it, nor call Redis
    breaker.failure()  # the probe failed: twice as long
    assert breaker.retry_in() == 4.0
    clock.now += 4.0
    assert breaker.allow()
    breaker.failure()
    assert breaker.retry_in() == 5.0  # capped
    clock.now += 5.0
    assert breaker.allow()
    breaker.success()
    assert not breaker.open
    assert breaker.allow()
    assert breaker.allow()
    breaker.failure()  # the period starts again from the first back-off
    assert breaker.retry_in() == 2.0


def test_an_abandoned_probe_lets_the_next_request_probe() -> None:
    """On a cluster a request may be let through by one node's breaker, as
    its probe, and held back by another's: the probe is given back."""
    clock = FakeMonotonic()
    breaker = CircuitBreaker(threshold=1, backoff=2.0, max_backoff=5.0, clock=clock)
    breaker.failure()
    clock.now += 2.0
    assert breaker.allow()  # the probe
    assert not breaker.allow()
    breaker.abandon()
    assert breaker.allow()  # another request probes instead
    breaker.success()
    breaker.abandon()  # closed: nothing to give back
    assert not breaker.open


def test_a_breaker_like_another_starts_closed_with_its_settings() -> None:
    clock = FakeMonotonic()
    breaker = CircuitBreaker(threshold=2, backoff=3.0, max_backoff=9.0, clock=clock)
    breaker.failure()
    breaker.failure()
    other = breaker.like()
    assert breaker.open
    assert not other.open
    assert (other.threshold, other.backoff, other.max_backoff, other.clock) == (2, 3.0, 9.0, clock)


@pytest.mark.parametrize("args", [(0, 1.0, 1.0), (1, 0.0, 1.0), (1, 2.0, 1.0)])
def test_breaker_refuses_bad_parameters(args: tuple[int, float, float]) -> None:
    with pytest.raises(ValueError, match="threshold"):
        CircuitBreaker(*args)


@pytest.fixture
def stalled_url() -> Iterator[str]:
    """A Redis URL whose server accepts connections and never answers, the
    way a stalled or black-holed Redis looks: every call costs a timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def counting_calls(state: RateLimitState) -> list[int]:
    """Record every script call the throttle makes to Redis."""
    assert state.throttle is not None
    sender = state.throttle.sender
    calls: list[int] = []
    evaluate = sender.evaluate

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return evaluate(*args, **kwargs)

    sender.evaluate = counted  # type: ignore[method-assign]
    return calls


def stalled_app(url: str, **config: object) -> tuple[Flask, RateLimitState]:
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 0.05})

    @app.get("/")
    @limit("2/m")
    def index() -> str:
        return "ok"

    return app, install(app, **config)


def test_while_open_requests_do_not_call_redis(stalled_url: str, caplog) -> None:
    app, state = stalled_app(stalled_url, RATELIMIT_BREAKER_THRESHOLD=2, RATELIMIT_BREAKER_BACKOFF=20.0)
    calls = counting_calls(state)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [get(client).status_code for _ in range(20)] == [200] * 20
    # Two requests paid the socket timeout; the other 18 were let through
    # at once, without touching the stalled server.
    assert len(calls) == 2
    assert len(extension_records(caplog)) == 1


def test_after_the_backoff_a_probe_reaches_redis(stalled_url: str) -> None:
    app, state = stalled_app(stalled_url, RATELIMIT_BREAKER_THRESHOLD=1, RATELIMIT_BREAKER_BACKOFF=5.0)
    assert state.throttle is not None
    assert state.throttle.breaker is not None
    clock = FakeMonotonic()
    state.throttle.breaker.clock = clock
    calls = counting_calls(state)
    client = app.test_client()
    get(client)
    get(client)
    assert len(calls) == 1
    clock.now += 5.0
    get(client)
    get(client)
    assert len(calls) == 2  # one probe; it failed, so open again for 10 s
    assert state.throttle.breaker.retry_in() == 10.0


def test_fail_closed_retry_after_follows_the_breaker(stalled_url: str) -> None:
    app, _ = stalled_app(
        stalled_url, RATELIMIT_FAIL_OPEN=False, RATELIMIT_BREAKER_THRESHOLD=1, RATELIMIT_BREAKER_BACKOFF=7.5
    )
    client = app.test_client()
    first = get(client)
    assert (first.status_code, first.headers["Retry-After"]) == (503, "8")
    second = get(client)
    assert second.status_code == 503
    assert 1 <= int(second.headers["Retry-After"]) <= 8


def test_no_breaker_calls_redis_every_time(stalled_url: str) -> None:
    app, state = stalled_app(stalled_url, RATELIMIT_BREAKER_THRESHOLD=0)
    assert state.throttle is not None
    assert state.throttle.breaker is None
    calls = counting_calls(state)
    client = app.test_client()
    for _ in range(4):
        get(client)
    assert len(calls) == 4


@pytest.mark.redis
def test_fallback_limits_in_memory_while_redis_is_down_then_hands_back(caplog) -> None:
    server = RedisServer()
    server.start()
    try:
        app = Flask("tests")
        app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=server.url, RATELIMIT_BLOCK_CACHE_SIZE=0)

        @app.get("/")
        @limit("2/m")
        def index() -> str:
            return "ok"

        state = install(app, RATELIMIT_FALLBACK=True, RATELIMIT_BREAKER_BACKOFF=20.0)
        assert state.throttle is not None
        assert state.throttle.breaker is not None
        client = app.test_client()
        assert get(client).status_code == 200  # counted in Redis
        server.stop()
        with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
            # The fallback knows nothing of Redis's count: two more pass, per process.
            assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
        assert "in memory" in caplog.records[0].getMessage()
        server.start()
        state.throttle.breaker.clock = lambda: float("inf")  # the back-off is over
        # Redis lost its counts in the restart; it decides again from scratch.
        assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
        assert get(client, ip="192.0.2.9").headers["RateLimit"].startswith('"1m";r=1')
    finally:
        server.close()


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_the_refusal_log_goes_through_the_breaker(app: Flask, redis_client, caplog) -> None:
    """The refusal log's XADD is a call to Redis like the script: its
    failure counts towards opening the breaker, and once open, no call is
    made at all."""

    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    state = install(app, RATELIMIT_BREAKER_THRESHOLD=1, RATELIMIT_BREAKER_BACKOFF=30.0, RATELIMIT_BLOCK_CACHE_SIZE=0)
    redis_client.set("rl:refusals", "not a stream")  # every XADD fails: WRONGTYPE
    calls = counting_calls(state)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(client).status_code == 200
        assert get(client).status_code == 429  # refused by Redis; its XADD failed
        after = get(client)
    assert "WRONGTYPE" in extension_records(caplog)[0].getMessage()
    # That one failure opened the breaker: the next request is not sent to
    # Redis, and is let through as the failure policy says.
    assert (after.status_code, "RateLimit" in after.headers) == (200, False)
    assert len(calls) == 2
