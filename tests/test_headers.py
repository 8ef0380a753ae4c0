"""Optional headers: the legacy X-RateLimit-* ones, and Retry-After as an HTTP-date."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

import pytest
from flask import Flask, Response, jsonify
from helpers import Clock, get, install
from werkzeug.datastructures import Headers

from flask_redis_throttle import RateLimitExceeded, limit
from flask_redis_throttle._request.headers import (
    LayerNames,
    LegacyNames,
    legacy_headers,
    retry_after_value,
    set_headers,
)
from flask_redis_throttle.core.engine.keys import Identity
from flask_redis_throttle.core.engine.rates import parse_limits
from flask_redis_throttle.core.engine.throttle import Decision, Policy


def limited(app: Flask, spec: str = "2/m", **config: object) -> None:
    @app.get("/")
    @limit(spec)
    def index() -> str:
        return "ok"

    install(app, **config)


def test_legacy_headers_under_names_of_the_apps_own(app: Flask, clock: Clock) -> None:
    @app.get("/")
    @limit("2/m")
    def index() -> tuple[str, dict[str, str]]:
        return "ok", {"x-limit": "the view's"}

    renamed = {"X-RateLimit-Limit": "X-Limit", "X-RateLimit-Reset": "X-Reset"}
    install(app, RATELIMIT_HEADERS_LEGACY=True, RATELIMIT_HEADER_NAMES=renamed)
    clock.set(15.5)
    response = get(app.test_client())
    assert response.headers.getlist("X-Limit") == ["2"]  # the view's is replaced
    assert response.headers["X-RateLimit-Remaining"] == "1"
    assert int(response.headers["X-Reset"]) >= time.time() + 44
    assert "X-RateLimit-Limit" not in response.headers
    assert "X-RateLimit-Reset" not in response.headers
    assert response.headers["RateLimit"] == '"1m";r=1;t=45'


def test_legacy_headers_beside_the_ietf_ones(app: Flask, clock: Clock) -> None:
    limited(app, RATELIMIT_HEADERS_LEGACY=True)
    clock.set(15.5)
    client = app.test_client()
    before = time.time()
    response = get(client)
    assert response.headers["RateLimit"] == '"1m";r=1;t=45'
    assert response.headers["X-RateLimit-Limit"] == "2"
    assert response.headers["X-RateLimit-Remaining"] == "1"
    # An epoch timestamp on the app server's clock, 44.5 seconds on, rounded up.
    assert before + 44.5 <= int(response.headers["X-RateLimit-Reset"]) <= time.time() + 45.5
    get(client)
    refused = get(client)
    assert refused.status_code == 429
    assert refused.headers["X-RateLimit-Remaining"] == "0"


def test_no_legacy_headers_by_default(app: Flask) -> None:
    limited(app)
    assert "X-RateLimit-Limit" not in get(app.test_client()).headers


def http_date_seconds(value: str) -> float:
    return parsedate_to_datetime(value).timestamp()


def test_retry_after_as_an_http_date_is_never_early(app: Flask, clock: Clock) -> None:
    limited(app, "1/m", RATELIMIT_RETRY_AFTER="http-date")
    clock.set(0.25)
    client = app.test_client()
    get(client)
    before = time.time()
    refused = get(client)
    assert refused.status_code == 429
    retry_at = http_date_seconds(refused.headers["Retry-After"])
    assert before + 59.75 <= retry_at <= time.time() + 60.75
    assert retry_at == int(retry_at)


def test_a_custom_429_handler_gets_the_http_date_too(app: Flask) -> None:
    @app.errorhandler(RateLimitExceeded)
    def too_many(error: RateLimitExceeded):  # type: ignore[no-untyped-def]
        return jsonify(wait=error.retry_after, header=error.retry_after_header), 429

    limited(app, "1/m", RATELIMIT_RETRY_AFTER="http-date")
    client = app.test_client()
    get(client)
    refused = get(client)
    assert refused.headers["Retry-After"].endswith(" GMT")
    assert refused.json is not None
    assert refused.json["header"].endswith(" GMT")
    assert 1 <= refused.json["wait"] <= 60


@pytest.mark.parametrize(
    ("retry_after", "now", "expected"),
    [
        (2.0, 1000.0, 1002),
        (0.2, 1000.5, 1002),  # at least a second on, as the seconds form
        (1.5, 1000.75, 1003),  # 1002.25, rounded up
        (59.000001, 1000.0, 1060),
    ],
)
def test_http_date_rounds_up(retry_after: float, now: float, expected: int) -> None:
    assert http_date_seconds(retry_after_value(retry_after, True, now)) == expected


@pytest.mark.parametrize(("retry_after", "expected"), [(0.0, "1"), (0.2, "1"), (1.0, "1"), (41.01, "42")])
def test_seconds_round_up(retry_after: float, expected: str) -> None:
    assert retry_after_value(retry_after, False, 0.0) == expected


def test_legacy_reset_rounds_up() -> None:
    assert legacy_headers(10, -1, 0.2, 1000.9) == [
        ("X-RateLimit-Limit", "10"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1002"),
    ]


@pytest.mark.parametrize("name", ["RateLimit", "ratelimit-policy"])
def test_headers_the_view_set_are_replaced_not_repeated(app: Flask, clock: Clock, name: str) -> None:
    """The headers are added when the response has none of them (nearly
    always), and replace any the view set: a response has one of each."""

    @app.get("/")
    @limit("2/m")
    def index() -> tuple[str, dict[str, str]]:
        return "ok", {name: "the view's", "X-Other": "kept"}

    install(app)
    clock.set(15.5)
    response = get(app.test_client())
    assert response.headers.getlist("RateLimit") == ['"1m";r=1;t=45']
    assert response.headers.getlist("RateLimit-Policy") == ['"1m";q=2;w=60']
    assert response.headers["X-Other"] == "kept"


class _OtherHeaders:
    """Headers with Werkzeug's methods but not its list."""

    def __init__(self, *items: tuple[str, str]) -> None:
        self.items = Headers(list(items))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.items)

    def add(self, name: str, value: str) -> None:
        self.items.add(name, value)

    def set(self, name: str, value: str) -> None:
        self.items.set(name, value)


def _minute_layer_decision(remaining: int) -> tuple[LayerNames, Decision]:
    """The header names of a "10/s;100/m" policy, and an admitted decision
    on its minute layer with ``remaining`` left, 59.2 s before its reset."""
    policy = Policy(parse_limits("10/s;100/m"), "s")
    decision = Decision(True, policy, policy.layers[1], Identity("ip", "1.2.3.4"), remaining, 59.2, 0.0)
    return LayerNames.of([policy]), decision


def test_the_headers_are_set_alike_on_werkzeug_headers_and_any_other() -> None:
    """Added, and set in place of ones the response already has, on
    Werkzeug's headers and on any other."""
    labels, decision = _minute_layer_decision(-1)
    expected = [("RateLimit-Policy", '"1s";q=10;w=1, "1m";q=100;w=60'), ("RateLimit", '"1m";r=0;t=60')]
    for headers in (Headers([("Content-Type", "text/plain")]), _OtherHeaders(("Content-Type", "text/plain"))):
        set_headers(headers, labels, decision, None)  # type: ignore[arg-type]
        assert list(headers)[1:] == expected
    for headers in (Headers([("ratelimit", "old")]), _OtherHeaders(("ratelimit", "old"))):
        set_headers(headers, labels, decision, None)  # type: ignore[arg-type]
        assert sorted(headers) == sorted(expected)


class _CheckedHeaders(Headers):
    """Werkzeug's headers with an ``add`` of the app's own, one that checks
    (here: notes) each header a response is given."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[str] = []

    def add(self, key: str, value: object, /, **kwargs: object) -> None:  # type: ignore[override]
        self.added.append(key)
        super().add(key, value, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("legacy", [False, True])
def test_the_headers_go_through_the_app_s_own_headers_class(app: Flask, legacy: bool) -> None:
    """A response whose headers are a subclass of Werkzeug's gets ours
    through its own ``add``, the public method it extends: never appended
    to a list inside Werkzeug's class, past the app's checks."""
    made: list[_CheckedHeaders] = []

    @app.get("/")
    @limit("2/m")
    def index() -> Response:
        made.append(_CheckedHeaders())
        return Response("ok", headers=made[0])

    install(app, RATELIMIT_HEADERS_LEGACY=legacy)
    response = get(app.test_client())
    assert response.status_code == 200
    ours = ["RateLimit-Policy", "RateLimit"] + (
        ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"] if legacy else []
    )
    assert [name for name in made[0].added if name in ours] == ours
    assert [name for name, _value in response.headers if name in ours] == ours


@pytest.mark.parametrize("name", [None, "RateLimit", "x-ratelimit-remaining", "X-RateLimit-Reset"])
def test_legacy_headers_the_view_set_are_replaced_not_repeated(app: Flask, clock: Clock, name: str | None) -> None:
    """With the legacy headers on, all five are appended after the view's
    when it set none of them, in their order; and each is replaced, not
    repeated, when it set any one of them."""

    @app.get("/")
    @limit("2/m")
    def index() -> tuple[str, dict[str, str]]:
        return "ok", {"X-Other": "kept"} if name is None else {name: "the view's", "X-Other": "kept"}

    install(app, RATELIMIT_HEADERS_LEGACY=True)
    clock.set(15.5)
    response = get(app.test_client())
    ours = ["RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"]
    for header in ours:
        assert len(response.headers.getlist(header)) == 1
    assert response.headers["RateLimit"] == '"1m";r=1;t=45'
    assert response.headers["X-RateLimit-Limit"] == "2"
    assert response.headers["X-RateLimit-Remaining"] == "1"
    assert response.headers["X-Other"] == "kept"
    if name is None:
        assert [key for key, _value in response.headers][-5:] == ours


def test_legacy_headers_are_set_alike_on_werkzeug_headers_and_any_other() -> None:
    """The legacy headers follow the IETF ones, appended when none of the
    five is there, and set in place of any that is, on either kind of headers."""
    labels, decision = _minute_layer_decision(7)
    ietf = [("RateLimit-Policy", '"1s";q=10;w=1, "1m";q=100;w=60'), ("RateLimit", '"1m";r=7;t=60')]
    for headers in (Headers([("Content-Type", "text/plain")]), _OtherHeaders(("Content-Type", "text/plain"))):
        set_headers(headers, labels, decision, LegacyNames())  # type: ignore[arg-type]
        added = list(headers)[1:]
        assert added[:2] == ietf
        assert [name for name, _ in added[2:]] == ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"]
        assert [value for _, value in added[2:4]] == ["100", "7"]
    for headers in (Headers([("x-ratelimit-limit", "old")]), _OtherHeaders(("x-ratelimit-limit", "old"))):
        set_headers(headers, labels, decision, LegacyNames())  # type: ignore[arg-type]
        found = list(headers)
        assert len(found) == 5
        assert found[0] == ("X-RateLimit-Limit", "100")  # replaced in place
        assert found[1:3] == ietf
