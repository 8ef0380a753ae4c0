"""Overrides set at run time (docs/overrides.rst): other layers, allow and
block, per identity or network, from the CLI, the dashboard and Python,
through real apps on every storage; followed by a second app on the same
Redis within a second."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from flask import Flask, Response, request
from helpers import FakeMonotonic, add_login, evalsha_calls, extension_records, flask_command, get, install
from test_dashboard import PREFIX, page, tables, token

from flask_redis_throttle import RateLimit, current_limit, dashboard, limit, refusal_log
from flask_redis_throttle.extension import RateLimitState


def shop(app: Flask, **config: Any) -> RateLimitState:
    """``/api`` (scope ``api``) and ``/other`` (scope ``other``), each 2 a
    minute per IP and per user; the dashboard for ``admin``."""
    add_login(app)

    @app.get("/api")
    @limit("2/m", scope="api")
    def api() -> str:
        return "ok"

    @app.get("/other")
    @limit("2/m", scope="other")
    def other() -> str:
        return "ok"

    app.register_blueprint(
        dashboard.blueprint(
            authorize=lambda: request.headers.get("X-User") == "admin", operator=lambda: "admin (dashboard)"
        ),
        url_prefix=PREFIX,
    )
    return install(app, RATELIMIT_BLOCK_CACHE_SIZE=0, **config)


def statuses(client: Any, n: int, path: str = "/api", **kwargs: Any) -> list[int]:
    return [get(client, path, **kwargs).status_code for _ in range(n)]


def cli(app: Flask, *args: str, code: int = 0) -> str:
    result = flask_command(app, "ratelimit", *args)
    assert result.exit_code == code, result.output
    return result.output


# other layers


def test_an_override_gives_one_identity_other_layers_on_one_scope(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    out = cli(app, "override", "user:42", "5/m", "--scope", "api", "--until", "2027-06-01")
    assert "user:42 limited to 5/1m on scope 'api' until 2027-06-01 00:00:00 UTC" in out
    # Each request from its own IP, so that only the user's counter can refuse.
    assert [get(client, "/api", ip=f"192.0.2.{n}", user="42").status_code for n in range(6)] == [200] * 5 + [429]
    assert [get(client, "/other", ip=f"192.0.2.{n}", user="42").status_code for n in range(3)] == [200, 200, 429]
    assert [get(client, "/api", ip=f"198.51.100.{n}", user="7").status_code for n in range(3)] == [200, 200, 429]


def test_an_override_keeps_the_view_s_concurrency_cap_and_its_delay(app: Flask) -> None:
    """Other layers replace a limit's rate, not its cap on requests at once
    (docs/overrides.rst, "Cap slow exports") nor its shaping delay."""

    @app.get("/export")
    @limit("2/m", concurrent=1)
    def export() -> Response:
        return Response(iter([b"ok"]))  # streamed: it holds its slot until closed

    @app.get("/shaped")
    @limit("1/s", delay="500ms")
    def shaped() -> str:
        found = current_limit()
        assert found is not None
        return str(found.retry_after)

    install(app, RATELIMIT_BLOCK_CACHE_SIZE=0)
    client = app.test_client()
    cli(app, "override", "ip:192.0.2.9", "4/s", "--for", "1h")
    first = get(client, "/export", ip="192.0.2.9")
    assert first.status_code == 200
    with get(client, "/export", ip="192.0.2.9") as second:
        assert second.status_code == 429
        assert second.headers["RateLimit"].startswith('"conc"')
    first.close()
    for _ in range(3):
        with get(client, "/export", ip="192.0.2.9") as again:
            assert again.status_code == 200
    # Shaped at the override's 4/s: one every 250 ms, the second waits its turn.
    waits = [float(get(client, "/shaped", ip="192.0.2.9").text) for _ in range(2)]
    assert waits == pytest.approx([0.0, 0.25])


def test_an_override_on_every_scope(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    cli(app, "override", "ip:192.0.2.9", "3/m", "--for", "1h")
    assert statuses(client, 4, ip="192.0.2.9") == [200, 200, 200, 429]
    assert statuses(client, 4, "/other", ip="192.0.2.9") == [200, 200, 200, 429]


def test_an_overridden_identity_keeps_what_it_has_used(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    assert statuses(client, 2, ip="192.0.2.9") == [200, 200]
    cli(app, "override", "ip:192.0.2.9", "3/m", "--scope", "api", "--for", "1h")
    assert statuses(client, 2, ip="192.0.2.9") == [200, 429]


def test_the_headers_name_the_overrides_layers(app: Flask) -> None:
    shop(app, RATELIMIT_IDENTITIES=["ip"])
    client = app.test_client()
    cli(app, "override", "ip:192.0.2.9", "10/s;100/h", "--scope", "api", "--for", "1h")
    response = get(client, "/api", ip="192.0.2.9")
    assert response.headers["RateLimit-Policy"] == '"1s";q=10;w=1, "1h";q=100;w=3600'
    assert get(client, "/api", ip="192.0.2.1").headers["RateLimit-Policy"] == '"1m";q=2;w=60'


# allow and block


def test_an_allowed_identity_is_not_limited(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    cli(app, "allow", "user:42", "--scope", "api", "--for", "1h")
    assert statuses(client, 5, user="42") == [200] * 5
    assert statuses(client, 3, "/other", ip="192.0.2.7", user="42") == [200, 200, 429]


@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_a_blocked_identity_is_refused_with_retry_after_and_no_redis_call(app: Flask, redis_client: Any) -> None:
    shop(app)
    client = app.test_client()
    cli(app, "block", "ip:192.0.2.9", "--for", "10m")
    calls = evalsha_calls(redis_client)
    responses = [get(client, "/api", ip="192.0.2.9") for _ in range(50)]
    assert {r.status_code for r in responses} == {429}
    assert {r.headers["Retry-After"] for r in responses} == {"600"}
    assert evalsha_calls(redis_client) == calls
    assert refusal_log(app).recent() == []  # nor logged as refusals
    assert get(client, "/api", ip="192.0.2.1").status_code == 200


def test_an_override_applies_only_where_a_limit_counts_the_identity(app: Flask) -> None:
    shop(app)

    @app.get("/free")
    def free() -> str:
        return "ok"

    @app.get("/by-ip")
    @limit("2/m", identities=["ip"])
    def by_ip() -> str:
        return "ok"

    client = app.test_client()
    cli(app, "block", "user:42", "--for", "1h")
    assert get(client, "/api", user="42").status_code == 429
    assert get(client, "/free", user="42").status_code == 200
    assert get(client, "/by-ip", user="42").status_code == 200


def test_a_block_can_answer_403(app: Flask) -> None:
    shop(app, RATELIMIT_OVERRIDE_BLOCK_STATUS=403)
    client = app.test_client()
    cli(app, "block", "user:42", "--scope", "other", "--for", "1h")
    assert get(client, "/other", user="42").status_code == 403
    assert get(client, "/api", user="42").status_code == 200


def test_a_network_covers_its_addresses_ipv4_and_ipv6(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    cli(app, "block", "ip:203.0.113.0/24", "--for", "1h")
    cli(app, "allow", "ip:2001:db8::/48", "--for", "1h")
    assert get(client, "/api", ip="203.0.113.77").status_code == 429
    assert statuses(client, 3, ip="203.0.114.1") == [200, 200, 429]
    assert statuses(client, 5, ip="2001:db8:0:5::1") == [200] * 5
    assert statuses(client, 3, ip="2001:db9::1") == [200, 200, 429]


def test_a_block_wins_and_a_scope_wins_over_every_scope(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    cli(app, "allow", "user:42", "--for", "1h")
    cli(app, "override", "user:42", "1/m", "--scope", "other", "--for", "1h")
    assert statuses(client, 3, user="42") == [200] * 3
    assert statuses(client, 2, "/other", user="42") == [200, 429]
    cli(app, "block", "ip:192.0.2.0/24", "--scope", "api", "--for", "1h")
    assert get(client, "/api", user="42").status_code == 429


def test_an_identity_wins_over_its_network_and_a_narrow_network_over_a_wide_one(app: Flask) -> None:
    shop(app, RATELIMIT_IDENTITIES=["ip"])
    client = app.test_client()
    cli(app, "override", "ip:192.0.0.0/16", "3/m", "--for", "1h")
    cli(app, "override", "ip:192.0.2.0/24", "4/m", "--for", "1h")
    cli(app, "override", "ip:192.0.2.9", "5/m", "--for", "1h")
    assert statuses(client, 4, ip="192.0.9.1") == [200] * 3 + [429]
    assert statuses(client, 5, ip="192.0.2.1") == [200] * 4 + [429]
    assert statuses(client, 6, ip="192.0.2.9") == [200] * 5 + [429]


def test_an_override_ends_by_itself(app: Flask, clock: Any) -> None:
    shop(app)
    client = app.test_client()
    cli(app, "block", "user:42", "--for", "60s")
    assert get(client, "/api", user="42").status_code == 429
    clock.advance(61)
    assert get(client, "/api", user="42").status_code == 200
    assert "No override is in force." in cli(app, "overrides")


@pytest.mark.parametrize("storage_url", ["redis", "cluster"], indirect=True)
def test_every_override_is_stored_with_an_expiry(app: Flask, clock: Any) -> None:
    state = shop(app)
    assert state.throttle is not None
    assert state.overrides is not None
    cli(app, "block", "user:42", "--for", "1h")
    cli(app, "allow", "user:7", "--for", "2h")
    client = state.throttle.storage.client
    left = client.pttl(state.overrides.store.key) / 1000
    until = state.overrides.now() + 7200  # the pinned clock's time, not Redis's
    assert abs(time.time() + left - until) < 5


# changes: logged, listed, checked


def test_each_change_is_logged_and_listed_with_who_what_and_until(app: Flask) -> None:
    shop(app)
    cli(app, "block", "ip:203.0.113.0/24", "--for", "2h", "--by", "alice")
    cli(app, "override", "user:42", "100/s;10000/h", "--scope", "api", "--until", "2027-06-01", "--by", "bob")
    cli(app, "lift", "ip:203.0.113.0/24", "--by", "carol")
    out = cli(app, "overrides")
    in_force, changes = out.split("Latest changes, newest first:")
    assert "user:42" in in_force
    assert "100/1s;10000/1h" in in_force
    assert "2027-06-01 00:00:00" in in_force
    assert "203.0.113" not in in_force
    lines = changes.strip().splitlines()[1:]
    assert [line.split()[2] for line in lines] == ["carol", "bob", "alice"]
    assert "removed" in lines[0]
    assert "2027-06-01 00:00:00" in lines[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("override", "user:1", "5/m", "--scope", "nope", "--for", "1h"), "unknown scope 'nope'"),
        (("override", "user:1", "5/q", "--for", "1h"), "invalid layer '5/q'"),
        (("block", "ip:203.0.113/24", "--for", "1h"), "'203.0.113/24' is not an IP network"),
        (("block", "ip:203.0.113.7/24", "--for", "1h"), "did you mean 203.0.113.0/24?"),
        (("block", "ip:10.0.0.0/8", "--for", "1h"), "wider than /16"),
        (("block", "ip:2001:db8::/32", "--for", "1h"), "wider than /48"),
        (("block", "user:1", "--until", "2020-01-01"), "is not in the future"),
        (("block", "user:1"), "give one end"),
        (("block", "user:1", "--for", "soon"), "is not a span"),
        (("block", "nobody", "--for", "1h"), "'nobody' has no kind"),
    ],
)
def test_bad_input_is_refused_naming_it_and_changes_nothing(app: Flask, args: tuple[str, ...], message: str) -> None:
    shop(app)
    assert message in cli(app, *args, code=2)
    assert cli(app, "overrides") == "No override is in force.\n"


def test_the_widest_networks_are_settings(app: Flask) -> None:
    shop(app, RATELIMIT_OVERRIDE_WIDEST_IPV4=8)
    cli(app, "block", "ip:10.0.0.0/8", "--for", "1h")
    assert get(app.test_client(), "/api", ip="10.9.8.7").status_code == 429


# followed by every process


@pytest.mark.real_clock
@pytest.mark.parametrize("storage_url", ["redis", "cluster"], indirect=True)
def test_another_app_on_the_same_storage_follows_a_change_within_a_second(storage_url: str) -> None:
    apps = []
    for _ in range(2):
        other = Flask("tests")
        other.config.update(TESTING=True, RATELIMIT_STORAGE_URL=storage_url)
        apps.append(other)
    serving, operating = apps
    for each in apps:
        each.get("/")(limit("1000/m")(lambda: "ok"))
        install(each)
    client = serving.test_client()
    assert get(client).status_code == 200  # its copy of the overrides is read

    def followed(expected: int) -> float:
        started = time.monotonic()
        while get(client).status_code != expected:
            assert time.monotonic() - started < 1.2, "not followed within a second"
            time.sleep(0.02)
        return time.monotonic() - started

    cli(operating, "block", "ip:192.0.2.1", "--for", "1h")
    assert followed(429) <= 1.1
    cli(operating, "lift", "ip:192.0.2.1")
    assert followed(200) <= 1.1


def test_an_unreachable_storage_lets_requests_through_with_no_error(caplog: pytest.LogCaptureFixture) -> None:
    app = Flask("dead")
    app.get("/")(limit("1/m")(lambda: "ok"))
    install(app, RATELIMIT_STORAGE_URL="redis://127.0.0.1:1/0")
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [get(app.test_client()).status_code for _ in range(5)] == [200] * 5
    # One warning, the outage's, as without overrides; and no internal error.
    [warning] = [r.getMessage() for r in extension_records(caplog)]
    assert "letting requests through" in warning
    assert "rate limit storage unavailable" in cli(app, "block", "user:1", "--for", "1h", code=1)


@pytest.mark.internal_error
def test_a_bug_reading_the_overrides_is_logged_when_it_repeats(
    app: Flask, monkeypatch: pytest.MonkeyPatch, internal_errors: list[logging.LogRecord]
) -> None:
    state = shop(app)
    assert state.overrides is not None
    follower = state.overrides.follower
    follower.monotonic = monotonic = FakeMonotonic()
    client = app.test_client()
    cli(app, "block", "user:42", "--for", "1h")

    def bug() -> bytes:
        raise TypeError("a bug in reading the overrides")

    monkeypatch.setattr(follower, "version", bug)
    for expected in (0, 1):
        monotonic.now += 1.0  # a second later: time to read them again
        assert get(client, "/api", user="42").status_code == 429  # the copy in hand stays in force
        assert len(internal_errors) == expected
    assert "internal error reading the overrides" in internal_errors[0].getMessage()


# Python and the dashboard


def test_python_sets_lists_and_removes_overrides(app: Flask) -> None:
    shop(app)
    ratelimit = RateLimit()  # the methods work on whichever app is given
    client = app.test_client()
    ratelimit.override("user:42", "3/m", scope="api", duration="1h", app=app)
    ratelimit.block("ip:203.0.113.0/24", duration=3600, app=app)
    assert [get(client, "/api", ip=f"192.0.2.{n}", user="42").status_code for n in range(4)] == [200] * 3 + [429]
    assert get(client, "/api", ip="203.0.113.5").status_code == 429
    assert [(o.target, o.action) for o in ratelimit.overrides(app=app)] == [
        ("ip:203.0.113.0/24", "block"),
        ("user:42", "limit"),
    ]
    assert len(ratelimit.remove_overrides("ip:203.0.113.0/24", app=app)) == 1
    assert get(client, "/api", ip="203.0.113.5").status_code == 200
    assert [c.what for c in ratelimit.override_changes(app=app)] == ["removed", "set", "set"]
    with pytest.raises(ValueError, match="unknown scope 'nope'"):
        ratelimit.allow("user:1", scope="nope", duration="1h", app=app)
    with pytest.raises(ValueError, match="give one end"):
        ratelimit.allow("user:1", app=app)


def test_the_dashboard_sets_lists_and_removes_an_override(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    html = page(client)
    form = {"csrf_token": token(html), "identity": "user:42", "action": "limit", "limit": "5/m"}
    response = client.post(
        f"{PREFIX}/overrides", data=form | {"scope": "api", "for": "2h"}, headers={"X-User": "admin"}
    )
    assert response.status_code == 302
    html = page(client)
    assert "user:42 limited to 5/1m on scope &#39;api&#39;" in html
    rows = tables(html)["overrides-table"]
    assert rows[1][:4] == ["user:42", "api", "limit", "5/1m"]
    assert rows[1][5] == "admin (dashboard)"
    assert tables(html)["changes-table"][1][1:3] == ["admin (dashboard)", "set"]
    assert statuses(client, 3, "/other", user="42") == [200, 200, 429]
    remove = {"csrf_token": token(html), "target": "user:42", "scope": "api"}
    assert client.post(f"{PREFIX}/overrides/remove", data=remove, headers={"X-User": "admin"}).status_code == 302
    assert "No override is in force." in page(client)


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"identity": "ip:10.0.0.0/8", "action": "block", "for": "1h"}, "wider than /16"),
        ({"identity": "user:1", "action": "limit", "limit": "", "for": "1h"}, "needs a limit"),
        ({"identity": "user:1", "action": "ban", "for": "1h"}, "unknown action"),
        ({"identity": "user:1", "action": "block", "until": "2020-01-01"}, "not in the future"),
    ],
)
def test_the_dashboard_refuses_bad_input_with_the_reason(app: Flask, form: dict[str, str], message: str) -> None:
    shop(app)
    client = app.test_client()
    data = form | {"csrf_token": token(page(client))}
    response = client.post(f"{PREFIX}/overrides", data=data, headers={"X-User": "admin"})
    assert response.status_code == 400
    assert message in response.text
    assert "No override is in force." in page(client)


def test_the_dashboard_refuses_a_change_without_the_sessions_token(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    page(client)
    form = {"identity": "user:1", "action": "block", "for": "1h", "csrf_token": "forged"}
    assert client.post(f"{PREFIX}/overrides", data=form, headers={"X-User": "admin"}).status_code == 400
    assert client.post(f"{PREFIX}/overrides", data=form).status_code == 404  # not authorized: hidden
    assert "No override is in force." in page(client)
