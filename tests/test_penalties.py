"""Penalties: repeat offenders blocked for an escalating time, in the same script call."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from flask import Flask, Response, request
from helpers import Clock, extension_records, failing_hits, get, install, storage_faults

from flask_redis_throttle import (
    ConfigurationError,
    InvalidLimit,
    RateLimitExceeded,
    limit,
    refusal_log,
)
from flask_redis_throttle.core.engine.penalties import Penalty, parse_penalty
from flask_redis_throttle.extension import RateLimitState


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1m", Penalty(60, 1, 60)),
        ("30s;x3", Penalty(30, 3, 86_400)),
        ("2d;x2", Penalty(172_800, 2, 172_800)),
        ("1m;x2;max=1h", Penalty(60, 2, 3600)),
        (" 2 minutes ; X2 ; max = 1 hour ", Penalty(120, 2, 3600)),
        ("1m;max=1h;x2", Penalty(60, 2, 3600)),
        ("1m;x1", Penalty(60, 1, 60)),
    ],
)
def test_parse_penalty(spec: str, expected: Penalty) -> None:
    penalty = parse_penalty(spec)
    assert (penalty.first, penalty.factor, penalty.longest) == (expected.first, expected.factor, expected.longest)
    assert penalty.spec == spec


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("1m;x2;x3", "gives the factor twice"),
        ("1m;x2;x2", "gives the factor twice"),
        ("1m;max=1h;max=2h", "gives max twice"),
        ("1m;x2;max=1h;max=1h", "gives max twice"),
        ("1m;max=1h", "max has no effect without a factor above 1"),
        ("1m;x1;max=1h", "max has no effect without a factor above 1"),
    ],
)
def test_a_repeated_or_useless_part_is_invalid(spec: str, message: str) -> None:
    # Taking the last value, or a max that changes nothing, would hide a typo.
    with pytest.raises(InvalidLimit, match=message) as info:
        parse_penalty(spec)
    assert repr(spec) in str(info.value)


@pytest.mark.parametrize(
    "spec", ["9" * 900 + "s", "1m;x" + "9" * 900, "1m;x2;max=" + "9" * 900 + "s", "1m;x2" + " " * 2000]
)
def test_huge_penalties_are_invalid_limits_not_bare_value_errors(spec: str) -> None:
    original = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        with pytest.raises(InvalidLimit, match="penalty"):
            parse_penalty(spec)
    finally:
        sys.set_int_max_str_digits(original)


def test_blocks_escalate_up_to_the_longest() -> None:
    penalty = parse_penalty("1m;x2;max=5m")
    assert [penalty.duration(level) for level in range(1, 6)] == [60, 120, 240, 300, 300]
    assert [parse_penalty("1m").duration(level) for level in (1, 9)] == [60, 60]


def penalized_app(app: Flask, **options: Any) -> None:
    @app.get("/")
    @limit("2/s", identities=["ip"], penalty="10s;x2;max=40s", **options)
    def index() -> str:
        return "ok"

    @app.get("/other")
    @limit("2/s", identities=["ip"])
    def other() -> str:
        return "ok"

    install(app)


def retry_after(client: Any, ip: str = "192.0.2.1") -> int | None:
    """The Retry-After of a request now, or None if it passed."""
    response = get(client, ip=ip)
    return int(response.headers["Retry-After"]) if response.status_code == 429 else None


def offend(client: Any, clock: Clock, at: float) -> int | None:
    """At ``at``, use up the 2/s and send one more: its Retry-After."""
    clock.set(at)
    assert [retry_after(client), retry_after(client)] == [None, None]
    return retry_after(client)


def test_repeat_offenders_are_blocked_longer_each_time(app: Flask, clock: Clock) -> None:
    penalized_app(app)
    client = app.test_client()
    # The refusal that starts a block says so in its Retry-After.
    assert offend(client, clock, 0.0) == 10
    clock.set(1.5)  # the 2/s has room again, but the block lasts
    assert retry_after(client) == 9
    assert retry_after(client, ip="192.0.2.2") is None  # others are not blocked
    assert get(client, "/other").status_code == 200  # nor other limits
    assert offend(client, clock, 10.0) == 20
    assert offend(client, clock, 30.0) == 40
    assert offend(client, clock, 70.0) == 40  # the longest
    clock.set(109.999)
    assert retry_after(client) == 1


def test_refusals_during_a_block_are_not_offences(app: Flask, clock: Clock) -> None:
    penalized_app(app)
    client = app.test_client()
    assert offend(client, clock, 0.0) == 10
    for at in range(1, 10):
        clock.set(at + 0.5)
        assert [retry_after(client) for _ in range(5)] == [10 - at] * 5
    assert offend(client, clock, 10.0) == 20  # the second offence, not the 47th


def test_an_offence_is_forgotten_a_longest_block_after_its_block(app: Flask, clock: Clock) -> None:
    penalized_app(app)
    client = app.test_client()
    assert offend(client, clock, 0.0) == 10
    assert offend(client, clock, 49.0) == 20  # 39 s after the block: remembered
    assert offend(client, clock, 69.0 + 40.0) == 10  # 40 s after: forgotten


def test_a_penalty_refusal_is_told_apart(app: Flask, caplog, clock: Clock) -> None:
    events: list[Any] = []

    @app.errorhandler(RateLimitExceeded)
    def too_many(error: RateLimitExceeded) -> Any:
        return {"penalized": error.penalized, "detail": error.description}, 429

    penalized_app(app, on_breach=events.append)
    client = app.test_client()
    offend(client, clock, 0.0)
    clock.set(2.0)
    blocked = get(client)
    assert blocked.json == {
        "penalized": True,
        "detail": "Rate limit exceeded too often: 2 per 1 second. Try again in 8 seconds.",
    }
    assert [event.penalized for event in events] == [True, True]
    with app.app_context():
        assert [refusal.penalized for refusal in refusal_log().recent()] == [True, True]


def test_a_penalty_key_always_expires(app: Flask, clock: Clock) -> None:
    penalized_app(app)
    client = app.test_client()
    offend(client, clock, 0.0)
    state: RateLimitState = app.extensions["ratelimit"]
    assert state.throttle is not None
    redis_client = state.throttle.storage.client
    [key] = redis_client.keys("*:pn")
    assert key.decode().endswith("}:index:pn")
    assert redis_client.get(key).startswith(b"1:")
    # The penalty (10 s) and then the longest penalty (40 s) to remember it.
    assert 49_000 < redis_client.pttl(key) <= 50_000


def test_a_penalty_with_deduct_when_counts_failed_logins(app: Flask, clock: Clock) -> None:
    @app.post("/login")
    @limit(
        "2/m",
        identities=["ip"],
        deduct_when=lambda response: response.status_code == 401,
        penalty="5m",
    )
    def login() -> Response:
        return Response("no", status=401 if request.args.get("password") != "right" else 200)

    install(app)
    client = app.test_client()

    def attempt(password: str = "wrong") -> Any:
        return client.post(f"/login?password={password}", environ_base={"REMOTE_ADDR": "192.0.2.1"})

    assert [attempt("right").status_code for _ in range(3)] == [200, 200, 200]
    assert [attempt().status_code for _ in range(2)] == [401, 401]
    clock.set(0.5)
    refused = attempt()
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "300"  # blocked, not just until the minute ends
    clock.set(120.0)
    assert attempt("right").status_code == 429  # a new minute, but still blocked
    clock.set(300.5)
    assert attempt("right").status_code == 200


def test_shadow_penalties_are_only_logged(app: Flask, caplog, clock: Clock) -> None:
    penalized_app(app, shadow=True)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert offend(client, clock, 0.0) is None
        clock.set(1.5)
        assert retry_after(client) is None
    warnings = [r.getMessage() for r in caplog.records if "shadow" in r.getMessage()]
    assert "(penalty)" in warnings[-1]


@pytest.mark.parametrize(
    ("first", "factor", "longest"),
    [(0, 1, 0), (2**33, 2, 2**34), (60, 0, 60), (60, 1001, 3600), (60, 2, 30), (60, 2, 10**10)],
)
def test_a_penalty_made_in_code_out_of_range_is_refused_when_made(first: int, factor: int, longest: int) -> None:
    """As a layer: the scripts take a penalty's numbers as 4-byte integers."""
    with pytest.raises(InvalidLimit, match="the penalties must be whole numbers of seconds"):
        Penalty(first, factor, longest)


def test_a_meta_limit_refuses_an_identity_refused_too_often(app: Flask, clock: Clock) -> None:
    @app.get("/")
    @limit("1/m", meta="2/h", error_message="Slow down.")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    statuses = []
    for minute in range(3):
        clock.set(60 * minute + 1)
        statuses += [get(client).status_code, get(client).status_code]
    # Two refusals in the hour, and then nothing passes, the first of each minute included.
    assert statuses == [200, 429, 200, 429, 429, 429]
    refused = get(client)
    assert refused.headers["RateLimit"].startswith('"1h";r=0;')
    assert refused.text == "Slow down.\n"  # the limit's own message and hook
    assert get(client, ip="192.0.2.9").status_code == 200  # another identity
    clock.set(3601)
    assert get(client).status_code == 200


@pytest.mark.internal_error
@storage_faults
def test_a_refusal_the_storage_fails_to_count_in_a_meta_limit_stands_and_is_logged(
    app: Flask, clock: Clock, caplog: pytest.LogCaptureFixture, error: Exception, logged: str
) -> None:
    @app.get("/")
    @limit("1/m", meta="2/h")
    def index() -> str:
        return "ok"

    state = install(app)
    # A meta limit's count of a refusal: the only call at cost 1 on its scope.
    failing_hits(state, error, lambda checks, cost: cost == 1 and checks[0][0].scope.endswith("+meta"))
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [get(client).status_code for _ in range(4)] == [200, 429, 429, 429]
    lost = [r.getMessage() for r in extension_records(caplog) if "meta limits" in r.getMessage()]
    assert lost, extension_records(caplog)
    assert all(logged in message for message in lost), lost
    assert lost[0].endswith("; a refusal is not counted in the meta limits.")
    clock.set(61)  # three refusals went uncounted, so the meta limit of 2 lets the next minute in
    assert get(client).status_code == 200


def test_ratelimit_meta_counts_the_refusals_of_every_limit(app: Flask, clock: Clock) -> None:
    seen: list[str] = []

    def tea(event: Any) -> Response:
        seen.append(event.scope)
        return Response("Would you like some tea?", 429)

    @app.get("/a")
    @limit("1/m")
    def a() -> str:
        return "a"

    @app.get("/b")
    @limit("1/m", scope="b")
    def b() -> str:
        return "b"

    app.add_url_rule("/free", "free", lambda: "free")
    install(app, RATELIMIT_META={"limit": "2/h", "on_breach": tea})
    client = app.test_client()
    clock.set(1)
    assert [get(client, path).status_code for path in ("/a", "/a", "/b", "/b")] == [200, 429, 200, 429]
    assert seen == []
    clock.set(61)
    refused = get(client, "/a")
    assert (refused.status_code, refused.text) == (429, "Would you like some tea?")
    assert seen == ["@meta"]
    assert get(client, "/free").status_code == 200  # no limit, no meta limit either
    plan = app.extensions["ratelimit"].plan("a")
    assert [(limit.source, limit.scope) for limit in plan.limits] == [("view", "a"), ("RATELIMIT_META", "@meta")]


@pytest.mark.parametrize(
    "value",
    ["2/h", {"limit": "2/h", "cost": 2}, {"limit": "2/h", "per_method": True}, {"limit": "2/h", "shadow": True}],
)
def test_ratelimit_meta_takes_only_a_meta_limits_options(value: Any) -> None:
    app = Flask("meta")
    app.config["RATELIMIT_META"] = value
    if value == "2/h":
        install(app)
        return
    with pytest.raises(ConfigurationError, match="RATELIMIT_META"):
        install(app)


@pytest.mark.parametrize("meta", [5, "5 per fortnight"])
def test_a_bad_meta_limit_is_refused_when_written(meta: Any) -> None:
    with pytest.raises(InvalidLimit):
        limit("1/m", meta=meta)


def test_shadow_refusals_are_not_counted_by_a_meta_limit(app: Flask, clock: Clock) -> None:
    @app.get("/shadow")
    @limit("1/m", shadow=True, meta="1/h")
    def shadow() -> str:
        return "ok"

    @app.get("/")
    @limit("1/m", meta="1/h")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    clock.set(1)
    assert [get(client, "/shadow").status_code for _ in range(3)] == [200, 200, 200]
    assert [get(client).status_code for _ in range(3)] == [200, 429, 429]  # the third by the meta limit
