"""The near-limit signal: a metric and a log entry when an identity passes a
share of a layer, before it is refused; and shadow mode for every limit
as the way to try a new configuration on real traffic."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from helpers import Clock, FakeMonotonic, get
from prometheus_client import CollectorRegistry

from flask_redis_throttle import RateLimit, limit, near_limit_log
from flask_redis_throttle._request import refusing as _refusing
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.extension import RateLimitState


def near_app(app: Flask, spec: str = "10/m", **config: Any) -> tuple[RateLimitState, CollectorRegistry]:
    """``/`` limited to ``spec``, with metrics, and a monotonic clock the test moves."""
    options: dict[str, Any] = {}
    for name in ("cost", "strategy"):
        if name in config:
            options[name] = config.pop(name)

    @app.get("/")
    @limit(spec, **options)
    def index() -> str:
        return "ok"

    app.config.update(config)
    registry = CollectorRegistry()
    RateLimit(app, metrics=registry)
    state: RateLimitState = app.extensions["ratelimit"]
    state.clock = FakeMonotonic()  # type: ignore[method-assign]
    return state, registry


def signals(registry: CollectorRegistry, endpoint: str = "index", scope: str = "index") -> float:
    value = registry.get_sample_value("ratelimit_near_limit_total", {"endpoint": endpoint, "scope": scope})
    return value or 0.0


def sent(client: Any, **kwargs: Any) -> int:
    """GET ``/`` and close the response, as a server does once it is sent."""
    response = get(client, **kwargs)
    response.close()
    return int(response.status_code)


def logged(app: Flask) -> list[tuple[str, str, str, float, bool]]:
    with app.app_context():
        return [
            (entry.identity, entry.scope, entry.layer, entry.retry_after, entry.shadow)
            for entry in near_limit_log().recent()
        ]


def test_an_identity_past_80_percent_is_signalled_once_before_it_is_refused(app: Flask, clock: Clock) -> None:
    _state, registry = near_app(app)
    clock.set(0.5)
    client = app.test_client()
    assert [sent(client) for _ in range(7)] == [200] * 7
    assert signals(registry) == 0
    assert logged(app) == []
    # The eighth request uses 8 of 10: 80 %, exactly.
    assert sent(client) == 200
    assert signals(registry) == 1
    assert logged(app) == [("ip:192.0.2.1", "index", "10/1m", 0.0, False)]
    # Not again for the requests after it, nor for the refusals.
    assert [sent(client) for _ in range(4)] == [200, 200, 429, 429]
    assert signals(registry) == 1
    assert len(logged(app)) == 1
    # Another identity has its own signal.
    assert [sent(client, ip="192.0.2.2") for _ in range(8)] == [200] * 8
    assert [entry[0] for entry in logged(app)] == ["ip:192.0.2.2", "ip:192.0.2.1"]


def test_the_entry_is_written_once_the_response_is_sent(app: Flask, clock: Clock) -> None:
    near_app(app)
    clock.set(0.5)
    client = app.test_client()
    for _ in range(7):
        sent(client)
    crossing = get(client)
    assert crossing.status_code == 200
    # The request did not wait for the log: its entry comes when the
    # server closes the response.
    assert logged(app) == []
    crossing.close()
    assert len(logged(app)) == 1


def test_the_next_window_signals_again(app: Flask, clock: Clock) -> None:
    state, registry = near_app(app)
    clock.set(0.5)
    client = app.test_client()
    for _ in range(8):
        sent(client)
    clock.advance(60)
    state.clock.now += 60  # type: ignore[attr-defined]
    for _ in range(8):
        sent(client)
    assert signals(registry) == 2
    assert len(logged(app)) == 2


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_one_signal_per_window_when_the_count_falls_back_and_crosses_again(
    app: Flask, clock: Clock, strategy: str
) -> None:
    """On the gradual strategies, room comes back within the window, so the
    count can cross the line again: the identity is still signalled once."""
    _state, registry = near_app(app, strategy=strategy)
    clock.set(0.5)
    client = app.test_client()
    for _ in range(8):
        sent(client)
    for _ in range(3):
        clock.advance(6.5)  # a little more than a tenth of the window
        sent(client)
    assert signals(registry) == 1
    assert len(logged(app)) == 1


def test_a_process_remembers_a_bounded_number_of_signalled_identities(
    app: Flask, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory that keeps an identity from being signalled twice in a
    window forgets the oldest first: then it may be signalled again."""
    monkeypatch.setattr(_refusing, "NEAR_LIMIT_MEMORY", 2)
    near_app(app, strategy="gcra")
    clock.set(0.5)
    client = app.test_client()
    for ip in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):
        for _ in range(8):
            sent(client, ip=ip)
    clock.advance(6.5)  # room for one more, so each crosses the line again
    for ip in ("192.0.2.3", "192.0.2.1"):
        sent(client, ip=ip)
    identities = [entry[0] for entry in logged(app)]
    # The third is remembered; the first was forgotten, and is signalled again.
    assert identities == ["ip:192.0.2.1", "ip:192.0.2.3", "ip:192.0.2.2", "ip:192.0.2.1"]


def test_a_cost_that_jumps_past_the_line_is_signalled(app: Flask, clock: Clock) -> None:
    _state, registry = near_app(app, cost=5)
    clock.set(0.5)
    client = app.test_client()
    assert sent(client) == 200
    assert signals(registry) == 0
    assert sent(client) == 200  # from 5 to 10: past 8
    assert signals(registry) == 1


def test_the_layer_with_the_least_left_is_the_one_watched(app: Flask, clock: Clock) -> None:
    state, registry = near_app(app, "2/s;10/m")
    client = app.test_client()
    for second in range(4):
        clock.set(second + 0.25)
        state.clock.now = 1000.0 + second  # type: ignore[attr-defined]
        assert [sent(client), sent(client)] == [200, 200]
    # The minute passed 8 of 10 in the fourth second, with 2 left; the
    # second's layer, with 0 left each time, is the one watched.
    assert [entry[2] for entry in logged(app)] == ["2/1s"] * 4
    assert signals(registry) == 4


def test_the_share_is_a_setting(app: Flask, clock: Clock) -> None:
    _state, registry = near_app(app, RATELIMIT_NEAR_LIMIT=0.5)
    clock.set(0.5)
    client = app.test_client()
    for _ in range(4):
        sent(client)
    assert signals(registry) == 0
    sent(client)
    assert signals(registry) == 1


def test_a_quota_of_one_signals_on_its_one_request(app: Flask, clock: Clock) -> None:
    _state, registry = near_app(app, "1/m")
    client = app.test_client()
    assert [sent(client) for _ in range(3)] == [200, 429, 429]
    assert signals(registry) == 1
    assert logged(app) == [("ip:192.0.2.1", "index", "1/1m", 0.0, False)]


def test_no_signal_when_it_is_off(app: Flask, clock: Clock) -> None:
    _state, registry = near_app(app, RATELIMIT_NEAR_LIMIT=None)
    client = app.test_client()
    assert [sent(client) for _ in range(11)] == [200] * 10 + [429]
    assert signals(registry) == 0
    with app.app_context(), pytest.raises(RuntimeError, match="RATELIMIT_NEAR_LIMIT"):
        near_limit_log()


def test_shadow_mode_for_every_limit_signals_and_refuses_nothing(app: Flask, clock: Clock) -> None:
    """Trying a new configuration on real traffic: with RATELIMIT_SHADOW,
    nothing is refused, and who would come near the new limits, and who
    would be refused, is in the logs."""

    @app.get("/other")
    def other() -> str:
        return "ok"

    _state, registry = near_app(app, RATELIMIT_SHADOW=True, RATELIMIT_DEFAULT="5/m")
    clock.set(0.5)
    client = app.test_client()
    assert [sent(client) for _ in range(12)] == [200] * 12
    assert logged(app) == [("ip:192.0.2.1", "index", "10/1m", 0.0, True)]
    assert [sent(client, path="/other") for _ in range(6)] == [200] * 6
    assert signals(registry, "other", "other") == 1
    with app.app_context():
        from flask_redis_throttle import refusal_log

        refused = [(entry.endpoint, entry.shadow) for entry in refusal_log().recent()]
    assert refused == [("other", True), ("index", True)]
