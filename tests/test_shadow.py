"""Shadow mode: limits that log what they would refuse, and refuse nothing."""

from __future__ import annotations

import logging

from flask import Flask
from helpers import get, install, packed_records

from flask_redis_throttle import limit, refusal_log
from flask_redis_throttle.extension import RateLimitState


def counts(state: RateLimitState) -> dict[str, int]:
    """The count in each fixed-window counter, by scope."""
    assert state.throttle is not None
    client = state.throttle.storage.client
    return {
        key.decode().split(":")[-2]: count
        for key in client.keys("*{*")
        for _window, count in packed_records(key, client.get(key)).values()
    }


def test_a_shadow_limit_logs_and_lets_through(app: Flask, caplog) -> None:
    @app.get("/")
    @limit("2/m", shadow=True)
    def index() -> str:
        return "ok"

    state = install(app)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        responses = [get(client) for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    assert responses[-1].headers["RateLimit"] == '"1m";r=0;t=60'
    assert "Retry-After" not in responses[-1].headers
    # Logged once: the block cache repeats the second refusal, as it would
    # a real one, without asking Redis.
    [warning] = [r.getMessage() for r in caplog.records if "shadow" in r.getMessage()]
    assert "ip:192.0.2.1 on index would be refused by 2 per 1 minute" in warning
    with app.app_context():
        refusals = refusal_log().recent()
    assert [(refusal.endpoint, refusal.shadow) for refusal in refusals] == [("index", True)]
    # Refusals wrote nothing: the two that would pass were counted, no more.
    assert counts(state) == {"index": 2}


def test_shadow_mode_for_every_limit(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    app.add_url_rule("/other", "other", lambda: "ok")
    install(app, RATELIMIT_SHADOW=True, RATELIMIT_DEFAULT="1/m")
    client = app.test_client()
    assert statuses(client, 3, "/") == [200, 200, 200]
    assert statuses(client, 3, "/other") == [200, 200, 200]


def test_a_shadow_limit_does_not_stop_enforced_ones_from_counting(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("3/m")
    @limit("1/m", shadow=True, scope="trial")
    def index() -> str:
        return "ok"

    state = install(app)
    client = app.test_client()
    assert statuses(client, 4, "/") == [200, 200, 200, 429]
    assert counts(state) == {"index": 3, "trial": 1}


def test_requests_refused_by_enforced_limits_are_not_counted_by_shadow_ones(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("1/m")
    @limit("5/m", shadow=True, scope="trial")
    def index() -> str:
        return "ok"

    state = install(app)
    assert statuses(app.test_client(), 3, "/") == [200, 429, 429]
    assert counts(state) == {"index": 1, "trial": 1}
