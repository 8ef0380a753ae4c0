"""Refusal hooks: the request_refused signal and on_breach functions."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import get, install
from flask import Flask, Response, jsonify

from flask_redis_throttle import Identity, Layer, RateLimitExceeded, RefusalEvent, limit, request_refused


@pytest.fixture
def received() -> Iterator[list[tuple[Any, dict[str, Any]]]]:
    """What the request_refused signal sends, while the test runs."""
    seen: list[tuple[Any, dict[str, Any]]] = []

    def receiver(sender: Any, **fields: Any) -> None:
        seen.append((sender, fields))

    request_refused.connect(receiver)
    yield seen
    request_refused.disconnect(receiver)


def test_the_signal_tells_who_hit_which_limit(app: Flask, received) -> None:
    @app.get("/")
    @limit("1/m", identities=["ip"], scope="search")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    get(client)
    assert received == []
    assert get(client).status_code == 429
    [(sender, fields)] = received
    assert sender is app
    assert fields["request"].path == "/"
    assert fields["identity"] == Identity("ip", "192.0.2.1")
    assert fields["layer"] == Layer(1, 60)
    assert fields["retry_after"] == 60
    assert (fields["scope"], fields["endpoint"], fields["shadow"]) == ("search", "index", False)


def test_on_breach_per_limit_and_for_the_app(app: Flask) -> None:
    calls: list[tuple[str, RefusalEvent]] = []

    @app.get("/")
    @limit("1/m", on_breach=lambda event: calls.append(("limit", event)))
    def index() -> str:
        return "ok"

    @app.get("/other")
    @limit("1/m", shadow=True)
    def other() -> str:
        return "ok"

    install(app, RATELIMIT_ON_BREACH=lambda event: calls.append(("app", event)))
    client = app.test_client()
    for path in ("/", "/", "/other", "/other"):
        get(client, path)
    assert [(where, event.endpoint, event.shadow) for where, event in calls] == [
        ("limit", "index", False),
        ("app", "index", False),
        ("app", "other", True),
    ]
    assert calls[0][1].identity == Identity("ip", "192.0.2.1")


def test_a_failing_hook_does_not_turn_the_429_into_a_500(app: Flask, caplog) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("hook bug")

    after: list[str] = []

    def later(sender: Any, **fields: Any) -> None:
        after.append(fields["endpoint"])

    request_refused.connect(broken)
    request_refused.connect(later)
    try:

        @app.get("/")
        @limit("1/m", on_breach=broken)
        def index() -> str:
            return "ok"

        install(app, RATELIMIT_ON_BREACH=broken)
        client = app.test_client()
        get(client)
        with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
            response = get(client)
    finally:
        request_refused.disconnect(broken)
        request_refused.disconnect(later)
    assert response.status_code == 429
    failures = [r for r in caplog.records if r.exc_info and "hook bug" in str(r.exc_info[1])]
    assert len(failures) == 3  # the limit's hook, the app's, and the receiver
    assert after == ["index"]  # the hooks after the broken one still ran


def test_a_receiver_that_does_not_take_every_field_is_told_to_add_extra(app: Flask, caplog) -> None:
    # The signature docs/responses.rst showed before 0.3, without penalized.
    def count(sender, request, endpoint, scope, identity, layer, retry_after, shadow):  # type: ignore[no-untyped-def]
        raise AssertionError("never called: blinker passes penalized too")

    request_refused.connect(count)
    try:

        @app.get("/")
        @limit("1/m")
        def index() -> str:
            return "ok"

        install(app)
        client = app.test_client()
        get(client)
        with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
            assert get(client).status_code == 429
    finally:
        request_refused.disconnect(count)
    [record] = [r for r in caplog.records if r.exc_info]
    assert isinstance(record.exc_info[1], TypeError)  # type: ignore[index]
    assert "penalized" in str(record.exc_info[1])  # type: ignore[index]
    assert record.getMessage().endswith(
        "as a keyword argument (request, endpoint, scope, identity, layer, retry_after, shadow, penalized): "
        "if it does not take them all, add **extra"
    )


def test_on_breach_may_return_a_response_that_replaces_the_429(app: Flask, clock) -> None:
    def friendly(event: RefusalEvent) -> Response:
        return jsonify(error="slow down", identity=str(event.identity), retry_after=event.retry_after)

    @app.get("/")
    @limit("1/m", identities=["ip"], on_breach=friendly)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    get(client)
    clock.set(20)
    response = get(client)
    assert response.status_code == 200  # the hook's status, as in Flask-Limiter
    assert response.get_json() == {"error": "slow down", "identity": "ip:192.0.2.1", "retry_after": 40}
    assert response.headers["Retry-After"] == "40"
    assert response.headers["RateLimit"] == '"1m";r=0;t=40'


def test_the_limits_response_wins_over_the_apps(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", on_breach=lambda event: Response("limit", status=429))
    def index() -> str:
        return "ok"

    @app.get("/other")
    @limit("1/m", on_breach=lambda event: None)
    def other() -> str:
        return "ok"

    @app.get("/ignored")
    @limit("1/m", on_breach=lambda event: "not a response")
    def ignored() -> str:
        return "ok"

    install(app, RATELIMIT_ON_BREACH=lambda event: Response("app", status=503))
    client = app.test_client()
    bodies = []
    for path in ("/", "/other", "/ignored"):
        get(client, path)
        response = get(client, path)
        bodies.append((response.status_code, response.get_data(as_text=True)))
    assert bodies == [(429, "limit"), (503, "app"), (503, "app")]


def test_a_hooks_response_is_ignored_in_shadow_mode_and_when_not_a_response(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", shadow=True, on_breach=lambda event: Response("blocked", status=403))
    def index() -> str:
        return "ok"

    @app.get("/text")
    @limit("1/m", on_breach=lambda event: "blocked")
    def text() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [get(client).get_data(as_text=True) for _ in range(2)] == ["ok", "ok"]
    get(client, "/text")
    response = get(client, "/text")
    assert response.status_code == 429
    assert response.get_data(as_text=True).startswith("Rate limit exceeded")


def test_a_failing_hook_does_not_stop_the_next_ones_response(app: Flask, caplog) -> None:
    def broken(event: RefusalEvent) -> None:
        raise RuntimeError("hook bug")

    @app.get("/")
    @limit("1/m", on_breach=broken)
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_ON_BREACH=lambda event: Response("app", status=429))
    client = app.test_client()
    get(client)
    with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
        response = get(client)
    assert (response.status_code, response.get_data(as_text=True)) == (429, "app")
    assert [r for r in caplog.records if r.exc_info and "hook bug" in str(r.exc_info[1])]


def test_an_error_handler_still_sees_the_refusal_first(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", on_breach=lambda event: Response("hook", status=429))
    def index() -> str:
        return "ok"

    @app.errorhandler(429)
    def handler(error: Any) -> Any:
        assert isinstance(error, RateLimitExceeded)
        assert error.get_response().get_data(as_text=True) == "hook"
        return "handler", 429

    install(app)
    client = app.test_client()
    get(client)
    assert get(client).get_data(as_text=True) == "handler"


def test_a_response_for_a_request_that_can_never_pass(app: Flask) -> None:
    @app.post("/batch")
    @limit(lambda request: "2/m", cost=3, on_breach=lambda event: jsonify(never=event.retry_after is None))
    def batch() -> str:
        return "ok"

    install(app)
    response = app.test_client().post("/batch")
    assert response.get_json() == {"never": True}
    assert "Retry-After" not in response.headers
