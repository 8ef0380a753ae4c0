"""Every strategy through a real Flask app: chosen by setting or per view,
each with its own behaviour on the same traffic, and honest on the real clock."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
from flask import Flask
from helpers import Clock, add_login, align_to_window, get, install

from flask_redis_throttle import ConfigurationError, limit
from flask_redis_throttle.core.engine.scripts import PARTS, STRATEGIES
from flask_redis_throttle.current import current_limit
from flask_redis_throttle.errors import InvalidLimit

# "2/10s", requests at these seconds: each strategy's answer, as
# (status, Retry-After or None).
TIMES = [0, 1, 9, 10, 10.5, 11]
EXPECTED = {
    # Clock-aligned windows: a new window at 10 s admits two at once.
    "fixed-window": [(200, None), (200, None), (429, 1), (200, None), (200, None), (429, 9)],
    # One-second sub-buckets: the request at 0 s still counts until 11 s.
    "sliding-window": [(200, None), (200, None), (429, 2), (429, 1), (429, 1), (200, None)],
    # Exact: the request at 0 s leaves the window at exactly 10 s.
    "sliding-log": [(200, None), (200, None), (429, 1), (200, None), (429, 1), (200, None)],
    # A burst of 2, then one every 5 s: the time saved since 1 s pays for 9 and 10.
    "gcra": [(200, None), (200, None), (200, None), (200, None), (429, 5), (429, 4)],
}


def answers(app: Flask, clock: Clock) -> list[tuple[int, int | None]]:
    """Status and Retry-After of a GET at each of :data:`TIMES`."""
    client = app.test_client()
    result = []
    for at in TIMES:
        clock.set(at)
        response = get(client)
        retry = response.headers.get("Retry-After")
        result.append((response.status_code, retry and int(retry)))
        assert response.headers["RateLimit-Policy"] == '"10s";q=2;w=10'
    return result


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_on_the_same_traffic(app: Flask, strategy: str, clock: Clock) -> None:
    @app.get("/")
    @limit("2/10s")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_STRATEGY=strategy)
    assert answers(app, clock) == EXPECTED[strategy]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_decorator_overrides_the_setting(app: Flask, strategy: str, clock: Clock) -> None:
    @app.get("/")
    @limit("2/10s", strategy=strategy)
    def index() -> str:
        return "ok"

    other = next(name for name in STRATEGIES if name != strategy)
    install(app, RATELIMIT_STRATEGY=other)
    assert answers(app, clock) == EXPECTED[strategy]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_headers_report_the_layer_with_least_room(app: Flask, strategy: str, clock: Clock) -> None:
    add_login(app)

    @app.get("/")
    @limit("5/s;3/m")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_STRATEGY=strategy)
    client = app.test_client()
    clock.set(0.5)
    response = get(client, user="alice")
    assert response.status_code == 200
    # After one request the minute layer has 2 of 3 left, the second layer 4 of 5.
    name, remaining, reset = response.headers["RateLimit"].split(";")
    assert (name, remaining) == ('"1m"', "r=2")
    expected_reset = {"fixed-window": 60, "sliding-window": 66, "sliding-log": 60, "gcra": 20}
    assert reset == f"t={math.ceil(expected_reset[strategy] - (0.5 if strategy == 'fixed-window' else 0))}"
    for _ in range(2):
        assert get(client, user="alice").status_code == 200
    refused = get(client, user="alice")
    assert refused.status_code == 429
    assert refused.headers["RateLimit"].startswith('"1m";r=0;')


def test_limits_with_different_strategies_share_one_round_trip(app: Flask, clock: Clock) -> None:
    @app.get("/")
    @limit("2/10s", strategy="gcra")
    @limit("3/m", strategy="sliding-log", scope="shared")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    calls = []
    state = app.extensions["ratelimit"]
    evaluate = state.throttle.sender.evaluate

    def spy(strategies, keys, args):  # type: ignore[no-untyped-def]
        calls.append(strategies)
        return evaluate(strategies, keys, args)

    state.throttle.sender.evaluate = spy
    statuses = []
    for at in (0, 0, 0, 5, 9):
        clock.set(at)
        statuses.append(get(client).status_code)
    # GCRA admits 0, 0, then refuses the third at 0; at 5 it has room again
    # but the sliding log's 3/m is full from then on.
    assert statuses == [200, 200, 429, 200, 429]
    assert calls == [frozenset({"gcra", "sliding-log"})] * 5
    assert get(client).headers["RateLimit-Policy"] == '"10s";q=2;w=10, "1m";q=3;w=60'


def test_an_unknown_default_strategy_is_refused_at_init_app(app: Flask) -> None:
    # An unknown strategy= of a limit is refused when decorating: test_applying.py.
    with pytest.raises(ConfigurationError, match="RATELIMIT_STRATEGY"):
        install(app, RATELIMIT_STRATEGY="token-bucket")


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
@pytest.mark.parametrize(
    ("strategy", "retry_after"), [("fixed-window", 1), ("sliding-window", 2), ("sliding-log", 1), ("gcra", 1)]
)
@pytest.mark.real_clock
def test_real_clock_traffic(app: Flask, strategy: str, retry_after: int) -> None:
    @app.get("/")
    @limit("3/s")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_STRATEGY=strategy)
    client = app.test_client()
    # Start just after a second of Redis's clock, so that the four requests
    # happen inside one second, and inside its first tenth (a sliding-window
    # sub-bucket), whatever the load.
    align_to_window(1, within=0.03)
    assert [get(client).status_code for _ in range(3)] == [200, 200, 200]
    refused = get(client)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) == retry_after
    time.sleep(retry_after)
    assert get(client).status_code == 200


def test_each_strategy_record_says_what_it_can_do_and_why_not() -> None:
    can = {
        name: {ability for ability in ("packed", "delays", "bursts", "leases") if getattr(record, ability)}
        for name, record in PARTS.items()
    }
    assert can == {
        "fixed-window": {"packed", "leases"},
        "sliding-window": {"packed"},
        "sliding-log": {"delays"},
        "gcra": {"packed", "delays", "bursts"},
        "concurrency": set(),
    }


def test_a_strategy_record_alone_decides_its_burst(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GCRA whose record says it has no burst: its shaped view lets the
    # whole quota go at once, rather than one request every 0.25 s; the
    # fifth waits for the first turn to come back.
    gcra = replace(STRATEGIES["gcra"], no_burst="it lets the whole quota go at once")
    monkeypatch.setitem(STRATEGIES, "gcra", gcra)
    monkeypatch.setitem(PARTS, "gcra", gcra)

    @app.route("/")
    @limit("4/s", delay="500ms")
    def index() -> dict[str, float]:
        found = current_limit()
        assert found is not None
        return {"waited": found.retry_after}

    install(app)
    client = app.test_client()
    assert [get(client).json for _ in range(5)] == [{"waited": 0}] * 4 + [{"waited": 0.25}]


def test_a_strategy_record_alone_decides_its_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    gcra = replace(STRATEGIES["gcra"], no_delay="no reason at all")
    monkeypatch.setitem(STRATEGIES, "gcra", gcra)
    monkeypatch.setitem(PARTS, "gcra", gcra)
    with pytest.raises(InvalidLimit, match=r"^delay needs strategy='sliding-log', not 'gcra': no reason at all"):
        limit("4/s", delay="500ms")
