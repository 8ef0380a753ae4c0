"""Limited views, as a client sees them, on every storage."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from flask import Flask, Request, jsonify
from helpers import Clock, add_login, align_to_window, get, install

from flask_redis_throttle import Identity, InvalidLimit, Layer, RateLimitExceeded, limit


def limited_app(app: Flask, spec: str = "3/s;5/m", **options: object) -> None:
    """``/`` limited by ``spec``, Flask-Login on, the clock pinned at T0."""
    add_login(app)

    @app.get("/")
    @limit(spec, **options)  # type: ignore[arg-type]
    def index() -> str:
        return "ok"

    install(app)


def test_every_layer_must_have_room(app: Flask, statuses, clock: Clock) -> None:
    limited_app(app, "3/s;5/m")
    client = app.test_client()
    assert statuses(client, 4, "/") == [200, 200, 200, 429]
    clock.set(1.5)
    # Only two left in the minute, though the second has room for three.
    assert statuses(client, 3, "/") == [200, 200, 429]
    refused = get(client)
    assert refused.headers["Retry-After"] == str(60 - 1)  # the minute ends at 60.0


def test_refused_requests_consume_nothing(app: Flask, statuses, clock: Clock) -> None:
    limited_app(app, "2/s;4/m")
    client = app.test_client()
    assert statuses(client, 12, "/") == [200, 200] + [429] * 10
    clock.set(1.0)
    # The ten refusals did not eat into the minute: two more pass.
    assert statuses(client, 3, "/") == [200, 200, 429]


def test_ips_count_apart(app: Flask, statuses) -> None:
    limited_app(app, "2/m")
    client = app.test_client()
    assert statuses(client, 3, "/", ip="192.0.2.1") == [200, 200, 429]
    assert statuses(client, 3, "/", ip="192.0.2.2") == [200, 200, 429]


def test_a_user_is_limited_across_ips_and_an_ip_across_users(app: Flask, statuses) -> None:
    limited_app(app, "2/m")
    client = app.test_client()
    assert statuses(client, 1, "/", ip="192.0.2.1", user="alice") == [200]
    assert statuses(client, 1, "/", ip="192.0.2.2", user="alice") == [200]
    # alice is spent, from whatever IP
    assert statuses(client, 1, "/", ip="192.0.2.3", user="alice") == [429]
    # and 192.0.2.1 has one left, which bob may use, but not two
    assert statuses(client, 2, "/", ip="192.0.2.1", user="bob") == [200, 429]
    # bob was not charged for the refusal: he still has one, from a fresh IP
    assert statuses(client, 2, "/", ip="192.0.2.9", user="bob") == [200, 429]


def test_anonymous_requests_count_by_ip_only(app: Flask, statuses) -> None:
    limited_app(app, "1/m")
    client = app.test_client()
    assert statuses(client, 1, "/", ip="192.0.2.1") == [200]
    assert statuses(client, 1, "/", ip="192.0.2.1", user="alice") == [429]
    assert statuses(client, 1, "/", ip="192.0.2.2", user="alice") == [200]


def test_apps_without_flask_login_work(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    install(app)
    assert statuses(app.test_client(), 2, "/") == [200, 429]


@pytest.mark.parametrize(
    ("identities", "requests", "expected"),
    [
        # (ip, user) pairs; "user-or-ip" counts the user when there is one
        (["user-or-ip"], [("a", "u"), ("b", "u"), ("a", None), ("a", None)], [200, 429, 200, 429]),
        (["user"], [("a", None), ("a", None), ("a", "u"), ("b", "u")], [200, 200, 200, 429]),
        (["ip"], [("a", "u"), ("a", "v"), ("b", "u")], [200, 429, 200]),
    ],
)
def test_identities_per_limit(app: Flask, identities, requests, expected) -> None:
    limited_app(app, "1/m", identities=identities)
    client = app.test_client()
    ips = {"a": "192.0.2.1", "b": "192.0.2.2"}
    assert [get(client, ip=ips[ip], user=user).status_code for ip, user in requests] == expected


def test_key_function_identity(app: Flask, statuses) -> None:
    def api_key(request: Request) -> str | None:
        return request.headers.get("X-Api-Key")

    limited_app(app, "1/m", identities=[api_key])
    client = app.test_client()
    assert statuses(client, 2, "/", headers={"X-Api-Key": "k1"}) == [200, 429]
    assert statuses(client, 1, "/", headers={"X-Api-Key": "k2"}) == [200]
    # No key, no identity: the limit does not apply.
    assert statuses(client, 3, "/") == [200, 200, 200]


def test_ipv6_clients_are_grouped_by_prefix(app: Flask, statuses) -> None:
    limited_app(app, "1/m")
    client = app.test_client()
    assert statuses(client, 1, "/", ip="2001:db8:1:2::1") == [200]
    assert statuses(client, 1, "/", ip="2001:db8:1:2:ffff::9") == [429]  # same /64
    assert statuses(client, 1, "/", ip="2001:db8:1:3::1") == [200]  # another /64
    assert statuses(client, 1, "/", ip="::ffff:192.0.2.77") == [200]
    assert statuses(client, 1, "/", ip="192.0.2.77") == [429]  # the same IPv4 client


def test_ipv6_prefix_is_configurable(app: Flask, statuses) -> None:
    app.config["RATELIMIT_IPV6_PREFIX"] = 128
    limited_app(app, "1/m")
    client = app.test_client()
    assert statuses(client, 1, "/", ip="2001:db8::1") == [200]
    assert statuses(client, 1, "/", ip="2001:db8::2") == [200]


def test_x_forwarded_for_changes_nothing(app: Flask, statuses) -> None:
    limited_app(app, "1/m")
    client = app.test_client()
    assert statuses(client, 1, "/", ip="192.0.2.1") == [200]
    for spoof in ("198.51.100.1", "198.51.100.2, 192.0.2.1", "garbage"):
        assert statuses(client, 1, "/", ip="192.0.2.1", headers={"X-Forwarded-For": spoof}) == [429]


def test_views_in_one_scope_share_counters(app: Flask, statuses) -> None:
    @app.get("/a")
    @limit("2/m", scope="search")
    def a() -> str:
        return "a"

    @app.get("/b")
    @limit("2/m", scope="search")
    def b() -> str:
        return "b"

    @app.get("/c")
    @limit("2/m")
    def c() -> str:
        return "c"

    install(app)
    client = app.test_client()
    assert statuses(client, 1, "/a") + statuses(client, 2, "/b") == [200, 200, 429]
    assert statuses(client, 2, "/c") == [200, 200]


def test_several_limits_on_one_view_all_apply(app: Flask, statuses) -> None:
    add_login(app)

    @app.get("/")
    @limit("1/s;3/m", identities=["ip"])
    @limit("2/m", identities=["user"], scope="per-user")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    response = get(client, user="u")
    assert response.headers["RateLimit-Policy"] == '"1s";q=1;w=1, "1m";q=3;w=60, "1m-3";q=2;w=60'
    assert get(client, user="u", ip="192.0.2.2").status_code == 200
    refused = get(client, user="u", ip="192.0.2.3")
    assert refused.status_code == 429
    assert refused.headers["RateLimit"] == '"1m-3";r=0;t=60'


# Responses and headers


def test_policy_and_state_headers(app: Flask, clock: Clock) -> None:
    limited_app(app, "10/s;120/m;240/h")
    clock.set(0.25)
    client = app.test_client()
    response = get(client)
    assert response.headers["RateLimit-Policy"] == '"1s";q=10;w=1, "1m";q=120;w=60, "1h";q=240;w=3600'
    assert response.headers["RateLimit"] == '"1s";r=9;t=1'
    for _ in range(8):
        get(client)
    assert get(client).headers["RateLimit"] == '"1s";r=0;t=1'
    clock.set(59.5)
    # 9 left in this second, 109 in the minute: the header names the fewest left.
    assert get(client).headers["RateLimit"] == '"1s";r=9;t=1'
    for _ in range(100):
        get(client)  # 9 admitted, the rest refused and not counted
    clock.set(60)
    # A new second and minute; the hour has 240 - 21 = 219 left, the second 9.
    assert get(client).headers["RateLimit"] == '"1s";r=9;t=1'


def test_state_header_follows_the_emptiest_layer(app: Flask, clock: Clock) -> None:
    limited_app(app, "100/s;3/m")
    clock.set(59.5)
    client = app.test_client()
    assert get(client).headers["RateLimit"] == '"1m";r=2;t=1'


def test_refusal_is_text_by_default(app: Flask) -> None:
    limited_app(app, "1/m")
    client = app.test_client()
    get(client)
    # text/html gets text when something else is as welcome: only a client
    # that prefers HTML (a browser) gets a page, below.
    for accept in (None, "*/*", "text/plain", "text/html, text/plain", "text/html;q=0.5, */*"):
        headers = {"Accept": accept} if accept else {}
        response = get(client, headers=headers)
        assert response.status_code == 429
        assert response.mimetype == "text/plain"
        assert response.text == "Rate limit exceeded: 1 per 1 minute. Try again in 60 seconds.\n"
        assert response.headers["Retry-After"] == "60"


#: What Firefox and Chromium send when they navigate to a page.
BROWSERS = [
    "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,"
    "application/signed-exchange;v=b3;q=0.7",
    "text/html",
]


@pytest.mark.parametrize("accept", BROWSERS)
def test_refusal_is_a_page_for_browsers(app: Flask, accept: str, clock: Clock) -> None:
    limited_app(app, "1/m")
    clock.set(0.5)
    client = app.test_client()
    get(client)
    response = get(client, headers={"Accept": accept})
    assert response.status_code == 429
    assert response.content_type == "text/html; charset=utf-8"
    assert response.headers["Retry-After"] == "60"
    page = response.text
    assert page.startswith("<!doctype html>")
    assert "<title>429 Too Many Requests</title>" in page
    assert "<p>Rate limit exceeded: 1 per 1 minute. Try again in 60 seconds.</p>" in page
    assert '<strong id="retry-after">60</strong> seconds' in page
    assert "<script" not in page


@pytest.mark.parametrize("accept", [None, "application/json", BROWSERS[0]])
def test_a_refusal_varies_by_accept_for_caches(app: Flask, accept: str | None) -> None:
    # Its body depends on Accept: a shared cache that kept the page must not
    # hand it to a JSON client.
    limited_app(app, "1/m")
    client = app.test_client()
    get(client)
    response = get(client, headers={"Accept": accept} if accept else {})
    assert response.status_code == 429
    assert "accept" in response.vary.as_set()


def test_the_page_escapes_what_it_shows(app: Flask) -> None:
    # The description is made of numbers today, but it is escaped all the
    # same, should it ever carry something a client chose.
    error = RateLimitExceeded(Layer(1, 60), Identity("ip", "192.0.2.1"), 1.0, "s")
    error.description = "<b>"
    body = error.get_body({"HTTP_ACCEPT": "text/html"})
    assert "&lt;b&gt;" in body
    assert "<b>" not in body


@pytest.mark.parametrize("handled", [429, RateLimitExceeded])
def test_an_error_handler_overrides_the_page(app: Flask, handled: object) -> None:
    @app.errorhandler(handled)  # type: ignore[type-var]
    def slow_down(error: RateLimitExceeded) -> tuple[str, int]:
        return "slow down", 429

    limited_app(app, "1/m")
    client = app.test_client()
    get(client)
    response = get(client, headers={"Accept": BROWSERS[0]})
    assert response.status_code == 429
    assert response.text == "slow down"
    assert response.headers["Retry-After"] == "60"


@pytest.mark.parametrize(
    "accept",
    [
        "application/json",
        "application/problem+json",
        "text/html;q=0.5, application/json",
        "text/html, application/json",
    ],
)
def test_refusal_is_problem_json_for_json_clients(app: Flask, accept: str, clock: Clock) -> None:
    limited_app(app, "1/m")
    clock.set(0.5)
    client = app.test_client()
    get(client)
    response = get(client, headers={"Accept": accept})
    assert response.status_code == 429
    assert response.mimetype == "application/problem+json"
    assert json.loads(response.text) == {
        "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "title": "Quota Exceeded",
        "status": 429,
        "detail": "Rate limit exceeded: 1 per 1 minute. Try again in 60 seconds.",
        "violated-policies": ["1m"],
        "retry_after": 60,
    }
    assert response.headers["Retry-After"] == "60"
    assert response.headers["RateLimit"] == '"1m";r=0;t=60'


@pytest.mark.parametrize(("at", "retry_after"), [(0.0, 1), (0.000_001, 1), (0.5, 1), (0.999_999, 1)])
def test_retry_after_rounds_up(app: Flask, at: float, retry_after: int, clock: Clock) -> None:
    limited_app(app, "1/s")
    clock.set(at)
    client = app.test_client()
    get(client)
    assert get(client).headers["Retry-After"] == str(retry_after)


def test_custom_429_handler_gets_the_details(app: Flask, clock: Clock) -> None:
    @app.errorhandler(429)
    def too_many(error: RateLimitExceeded):  # type: ignore[no-untyped-def]
        body = {"layer": str(error.layer), "who": str(error.identity), "wait": error.retry_after, "scope": error.scope}
        return jsonify(body), 429

    limited_app(app, "5/s;1/h", identities=["ip"])
    clock.set(10)
    client = app.test_client()
    get(client)
    response = get(client)
    assert response.status_code == 429
    assert response.json == {"layer": "1 per 1 hour", "who": "ip:192.0.2.1", "wait": 3590, "scope": "index"}
    # The handler's response still gets Retry-After and the RateLimit headers.
    assert response.headers["Retry-After"] == "3590"
    assert response.headers["RateLimit"] == '"1h";r=0;t=3590'


def test_exception_attributes() -> None:
    error = RateLimitExceeded(Layer(1, 60), Identity("user", "7"), 0.2, "api")
    assert error.code == 429
    assert error.retry_after == 1
    assert error.layer == Layer(1, 60)
    assert str(error.identity) == "user:7"


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
@pytest.mark.real_clock
def test_retry_after_is_honest_on_the_real_clock(app: Flask) -> None:
    @app.get("/")
    @limit("2/s;3/2s")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    # Start just after an even second of Redis's clock, so that the requests
    # below fall in one two-second window, whatever the machine's load.
    align_to_window(2)
    assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
    retry_after = int(get(client).headers["Retry-After"])
    assert retry_after == 1
    time.sleep(retry_after)
    # The 2s layer still has one left: one passes, then the 2s layer refuses.
    assert [get(client).status_code for _ in range(2)] == [200, 429]


def test_automatic_options_requests_are_not_counted(app: Flask, statuses) -> None:
    limited_app(app, "1/m")
    client = app.test_client()
    assert [client.options("/").status_code for _ in range(3)] == [200, 200, 200]
    assert statuses(client, 2, "/") == [200, 429]


def test_get_response_in_a_handler_negotiates_from_the_current_request(app: Flask) -> None:
    @app.errorhandler(RateLimitExceeded)
    def too_many(error: RateLimitExceeded):  # type: ignore[no-untyped-def]
        response = error.get_response()
        response.headers["X-Handled"] = "yes"
        return response

    limited_app(app, "1/m")
    client = app.test_client()
    get(client)
    response = get(client, headers={"Accept": "application/json"})
    assert response.headers["X-Handled"] == "yes"
    assert response.mimetype == "application/problem+json"
    assert response.json["status"] == 429


def test_key_functions_with_equal_values_count_apart(app: Flask, statuses) -> None:
    def tenant(request: Request) -> str:
        return "acme"

    def plan(request: Request) -> str:
        return "acme"

    @app.get("/")
    @limit("1/m", identities=[tenant])
    @limit("2/m", identities=[plan])
    def index() -> str:
        return "ok"

    install(app)
    # tenant's quota of 1 refuses the second request; were the two sharing a
    # counter, plan's quota would see 2 and refuse the first retry too.
    client = app.test_client()
    assert statuses(client, 2, "/") == [200, 429]
    state = app.extensions["ratelimit"]
    assert len(state.throttle.storage.client.keys("*{*")) == 2


def test_a_limits_error_message_is_the_429s_description(app: Flask) -> None:
    @app.get("/fixed")
    @limit("1/m", error_message="Once a minute.")
    def fixed() -> str:
        return "ok"

    @app.get("/chosen")
    @limit("1/m", error_message=lambda request: f"Once a minute, {request.args['name']}.")
    @limit("5/m")
    def chosen() -> str:
        return "ok"

    @app.errorhandler(429)
    def handler(error: Any) -> Any:
        return {"said": error.description}, 429

    install(app)
    client = app.test_client()
    get(client, "/fixed")
    assert get(client, "/fixed").json == {"said": "Once a minute."}
    get(client, "/chosen?name=Ann")
    assert get(client, "/chosen?name=Ann").json == {"said": "Once a minute, Ann."}


@pytest.mark.parametrize("returned", [None, "", 42])
def test_an_error_message_function_that_returns_nothing_keeps_ours(app: Flask, caplog, returned: Any) -> None:
    @app.get("/")
    @limit("1/m", error_message=lambda request: returned)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    get(client)
    refused = get(client)
    assert refused.status_code == 429
    assert refused.text.startswith("Rate limit exceeded: 1 per 1 minute.")
    assert f"returned {returned!r}; the 429 keeps its own description" in caplog.text


@pytest.mark.parametrize("message", ["", 42, b"bytes"])
def test_a_bad_error_message_is_refused_when_written(message: Any) -> None:
    with pytest.raises(InvalidLimit, match="error_message"):
        limit("1/m", error_message=message)
