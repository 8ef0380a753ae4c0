"""Overrides set at run time (docs/overrides.rst): other layers, allow and
block, per identity or network, from the CLI, the dashboard and Python,
through real apps on every storage; followed by a second app on the same
Redis within a second."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import signal
import time
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from flask import Flask, Response, request
from helpers import (
    ELSEWHERE,
    FakeMonotonic,
    add_login,
    evalsha_calls,
    extension_records,
    flask_command,
    get,
    install,
    run_elsewhere,
)
from test_dashboard import PREFIX, page, tables, token

from flask_redis_throttle import RateLimit, StorageUnavailable, current_limit, dashboard, limit, refusal_log
from flask_redis_throttle._ops import notices
from flask_redis_throttle._ops.override_changes import DISABLED, set_override
from flask_redis_throttle.core.engine.keys import Identity
from flask_redis_throttle.core.stores import overrides as overrides_module
from flask_redis_throttle.core.stores.overrides import LONGEST, Override, OverrideTable
from flask_redis_throttle.errors import BLOCKED, Blocked, RateLimitExceeded
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import RedisServer


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


#: The headers of a refusal that a block answers without counting the request in any layer.
LAYER_HEADERS = ("RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def test_a_block_s_refusal_follows_accept_with_retry_after_and_no_ratelimit_headers(app: Flask) -> None:
    shop(app, RATELIMIT_HEADERS_LEGACY=True)
    seen: list[Exception] = []

    @app.errorhandler(429)
    def handled(error: Exception) -> Any:
        seen.append(error)
        return error

    client = app.test_client()
    assert get(client, "/api", ip="192.0.2.9").headers["RateLimit"]  # counted, before the block
    cli(app, "block", "ip:192.0.2.9", "--for", "10m")
    as_json = get(client, "/api", ip="192.0.2.9", headers={"Accept": "application/json"})
    assert as_json.status_code == 429
    assert as_json.content_type == "application/problem+json"
    assert as_json.get_json() == {
        "type": BLOCKED,
        "title": "Blocked",
        "status": 429,
        "detail": "Blocked for 600 more seconds.",
        "retry_after": 600,
    }
    page = get(client, "/api", ip="192.0.2.9", headers={"Accept": "text/html"})
    assert page.content_type == "text/html; charset=utf-8"
    assert "<h1>Blocked</h1>" in page.text
    assert '<strong id="retry-after">600</strong>' in page.text
    text = get(client, "/api", ip="192.0.2.9")
    assert text.text == "Blocked for 600 more seconds.\n"
    for response in (as_json, page, text):
        assert response.headers["Retry-After"] == "600"
        assert "Accept" in response.headers["Vary"]
        assert [h for h in LAYER_HEADERS if h in response.headers] == []
    assert [type(e) for e in seen] == [Blocked] * 3  # the app's handler of 429s sees it, as a Blocked
    assert not isinstance(seen[0], RateLimitExceeded)  # no layer refused it


def test_a_block_s_403_and_http_date_follow_the_settings(app: Flask) -> None:
    shop(app, RATELIMIT_OVERRIDE_BLOCK_STATUS=403)
    cli(app, "block", "user:42", "--for", "1h")
    refused = get(app.test_client(), "/api", user="42", headers={"Accept": "application/problem+json"})
    assert refused.status_code == 403
    assert refused.get_json() == {"type": BLOCKED, "title": "Blocked", "status": 403, "detail": "Access is blocked."}
    assert "Retry-After" not in refused.headers
    assert [h for h in LAYER_HEADERS if h in refused.headers] == []


@pytest.mark.parametrize("storage_url", ["memory"], indirect=True)
def test_a_block_s_retry_after_is_an_http_date_when_asked(app: Flask) -> None:
    state = shop(app, RATELIMIT_RETRY_AFTER="http-date")
    cli(app, "block", "user:42", "--for", "1h")
    assert state.overrides is not None
    refused = get(app.test_client(), "/api", user="42")
    assert refused.status_code == 429
    ends = parsedate_to_datetime(refused.headers["Retry-After"]).timestamp()
    assert state.overrides.now() + 3600 <= ends <= state.overrides.now() + 3601


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


def api_key(request: Any) -> str | None:
    return request.headers.get("X-Api-Key")


def test_a_key_function_s_identity_can_be_blocked_allowed_and_overridden(app: Flask) -> None:
    """A key function's identity, written as the docs write it
    (``api_key:<value>``), is blocked, allowed and overridden like any
    other; ``overrides`` lists it in full, and that spelling lifts it.
    Before, the CLI said it blocked ``key:...api_key:evil`` and the key
    went on getting 200, 200, 429."""
    shop(app, RATELIMIT_IDENTITIES=[api_key])
    client = app.test_client()
    kind = f"key:{__name__}.api_key"

    def keyed(value: str, n: int) -> list[int]:
        return statuses(client, n, headers={"X-Api-Key": value})

    # Each from another surface: the CLI, Python and the dashboard.
    assert f"{kind}:evil blocked on every scope" in cli(app, "block", "api_key:evil", "--for", "1h")
    assert RateLimit().allow("api_key:friend", scope="api", duration="1h", app=app).target == f"{kind}:friend"
    form = {
        "csrf_token": token(page(client)),
        "identity": "api_key:big",
        "action": "limit",
        "limit": "4/m",
        "for": "1h",
    }
    assert client.post(f"{PREFIX}/overrides", data=form, headers={"X-User": "admin"}).status_code == 302
    assert keyed("evil", 3) == [429] * 3
    assert keyed("friend", 5) == [200] * 5
    assert keyed("big", 5) == [200] * 4 + [429]
    assert keyed("plain", 3) == [200, 200, 429]
    assert [row.split()[0] for row in cli(app, "overrides", "--changes", "0").splitlines()[1:]] == [
        f"{kind}:big",
        f"{kind}:evil",
        f"{kind}:friend",
    ]
    assert f"removed: {kind}:evil blocked on every scope" in cli(app, "lift", f"{kind}:evil")
    assert keyed("evil", 3) == [200, 200, 429]


def shim_key() -> str | None:
    return request.headers.get("X-Api-Key")


def test_a_flask_limiter_key_func_s_identity_can_be_blocked(url: str) -> None:
    """The same through the Flask-Limiter shim, whose key functions take no
    request: ``shim_key:evil`` names the identity its key_func returns."""
    from flask_redis_throttle.compat.flask_limiter import Limiter

    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_BLOCK_CACHE_SIZE=0)
    Limiter(shim_key, app=app, storage_uri=url, default_limits=["2/minute"])
    app.get("/")(lambda: "ok")
    client = app.test_client()
    assert f"key:{__name__}.shim_key:evil blocked" in cli(app, "block", "shim_key:evil", "--for", "1h")
    assert statuses(client, 3, "/", headers={"X-Api-Key": "evil"}) == [429] * 3
    assert statuses(client, 3, "/", headers={"X-Api-Key": "good"}) == [200, 200, 429]
    app.extensions["ratelimit"].throttle.storage.close()


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


def test_an_ipv4_mapped_network_covers_the_ipv4_network_it_maps(app: Flask) -> None:
    state = shop(app)
    client = app.test_client()
    assert "ip:203.0.113.0/24 blocked" in cli(app, "block", "ip:::ffff:203.0.113.0/120", "--for", "1h")
    assert "ip:198.51.100.9 blocked" in cli(app, "block", "ip:::ffff:198.51.100.9/128", "--for", "1h")
    for ip in ("203.0.113.77", "::ffff:203.0.113.78", "198.51.100.9", "::ffff:198.51.100.9"):
        assert get(client, "/api", ip=ip).status_code == 429, ip
    assert statuses(client, 3, ip="203.0.114.1") == [200, 200, 429]
    assert statuses(client, 3, ip="198.51.100.10") == [200, 200, 429]
    # Wider than the IPv4 bound, it is refused naming the IPv4 network.
    assert "(10.0.0.0/8)' is wider than /16" in cli(app, "block", "ip:::ffff:10.0.0.0/104", "--for", "1h", code=2)
    # A mapped network an earlier version stored as such covers the IPv4 one too.
    until = state.overrides.now() + 3600 if state.overrides is not None else 0
    older = {"action": "block", "target": "ip:::ffff:192.0.2.0/120", "scope": None, "until": until}
    write_fields(state, {"*\0older": json.dumps({**older, "limit": "", "network": True, "by": "x", "at": 0})})
    assert state.overrides is not None
    state.overrides.follower.refresh(force=True)
    assert get(client, "/api", ip="192.0.2.200").status_code == 429


@pytest.mark.parametrize(
    ("target", "written"),
    [
        ("ip:fe80::%eth0/64", "write fe80::/64"),
        ("ip:fe80::1%eth0", "write fe80::1"),
        ("ip:[fe80::1%25eth0]:443", "write [fe80::1]:443"),
        ("ip:::/64", "covers the IPv4-mapped addresses"),
    ],
)
def test_a_zone_id_or_a_network_over_the_mapped_addresses_is_refused(app: Flask, target: str, written: str) -> None:
    shop(app)
    assert written in cli(app, "block", target, "--for", "1h", code=2)
    assert cli(app, "overrides") == "No override is in force.\n"


def network_fields(state: RateLimitState, action: str, networks: list[str]) -> dict[str, str]:
    """Fields of network overrides on every scope, for :func:`write_fields`: thousands at once."""
    assert state.overrides is not None
    until = state.overrides.now() + 3600
    return {
        f"*\0ip:{network}": json.dumps(
            {"action": action, "target": f"ip:{network}", "scope": None, "until": until}
            | {"limit": "", "network": True, "by": "x", "at": 0}
        )
        for network in networks
    }


def test_ten_thousand_networks_are_found_by_prefix_not_one_by_one(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients from ever-new addresses, IPv4 and IPv6 /64s, against 10,000
    network overrides: each is looked up by its prefixes, one lookup per
    prefix length in use, never compared with each network; and the cache
    of lookups filling up changes nothing."""
    monkeypatch.setattr(overrides_module, "NETWORK_CACHE_SIZE", 8)  # full, and forgotten, every 8 clients
    state = shop(app, RATELIMIT_IDENTITIES=["ip"])
    blocked = [f"10.{n >> 8}.{n & 255}.0/24" for n in range(5000)] + [f"2001:db8:{n:x}::/48" for n in range(4990)]
    blocked += ["172.16.0.0/16", "172.17.0.0/20", "198.51.100.128/25", "2001:db9::/32", "2001:dba:0:100::/56"]
    allowed = ["172.16.5.0/24", "172.17.0.16/28", "2001:dba::/40", "2001:db9:1::/48", "198.51.100.0/30"]
    write_fields(state, network_fields(state, "block", blocked) | network_fields(state, "allow", allowed))
    assert state.overrides is not None
    state.overrides.follower.refresh(force=True)
    assert len(state.overrides.follower.table.overrides) == 10_000
    compared: list[str] = []
    for cls in (ipaddress.IPv4Network, ipaddress.IPv6Network):
        for name in ("subnet_of", "supernet_of", "overlaps", "__contains__"):
            original = getattr(cls, name)

            def counted(self: Any, other: Any, original: Any = original, name: str = name) -> Any:
                compared.append(name)
                return original(self, other)

            monkeypatch.setattr(cls, name, counted)
    client = app.test_client()
    expected = {
        **{f"10.{n >> 8}.{n & 255}.{n % 250 + 1}": 429 for n in range(0, 5000, 97)},
        **{f"2001:db8:{n:x}:{n:x}::1": 429 for n in range(0, 4990, 89)},
        **{f"10.{n}.0.1": 200 for n in range(20, 40)},  # outside every network
        **{f"2001:db8:{n:x}::1": 200 for n in range(4990, 5010)},
        "172.16.9.9": 429,  # in the /16
        "172.16.5.9": 429,  # in the /16 blocked and the narrower /24 allowed: a block wins
        "172.17.0.17": 429,
        "198.51.100.200": 429,
        "198.51.100.2": 200,  # allowed
        "198.51.100.77": 200,  # in no network
        "2001:db9:5::1": 429,
        "2001:dba:0:1ff::1": 429,
        "2001:dba:0:200::1": 200,  # allowed, and not in the /56
    }
    for ip, status in expected.items():
        assert get(client, "/api", ip=ip).status_code == status, ip
    assert compared == []


ABSURD = "999999999999999d"
#: A span too long for a float: an OverflowError, not a 400, before.
OVERFLOWING = "1" + "0" * 400 + "d"


def _set_absurdly(app: Flask, surface: str) -> str:
    """Block user:1 with an end centuries away through ``surface``: the
    error each answers with."""
    ratelimit = RateLimit()
    if surface.startswith("python"):
        end = {
            "python until": {"until": 1e17},
            "python until int": {"until": 10**400},
            "python duration": {"duration": ABSURD},
        }[surface]
        with pytest.raises(ValueError, match="the end") as raised:
            ratelimit.block("user:1", app=app, **end)  # type: ignore[arg-type]
        return str(raised.value)
    if surface.startswith("cli"):
        end = {
            "cli --for": ("--for", ABSURD),
            "cli --for overflowing": ("--for", OVERFLOWING),
            "cli --until": ("--until", "2999-01-01"),
        }[surface]
        return cli(app, "block", "user:1", *end, code=2)
    client = app.test_client()
    span = OVERFLOWING if surface == "dashboard overflowing" else ABSURD
    form = {"csrf_token": token(page(client)), "identity": "user:1", "action": "block", "for": span}
    response = client.post(f"{PREFIX}/overrides", data=form, headers={"X-User": "admin"})
    assert response.status_code == 400
    return str(response.text)


@pytest.mark.parametrize(
    "surface",
    [
        "python until",
        "python until int",
        "python duration",
        "cli --for",
        "cli --for overflowing",
        "cli --until",
        "dashboard",
        "dashboard overflowing",
    ],
)
def test_an_end_past_ten_years_is_refused_before_anything_is_written(app: Flask, surface: str) -> None:
    """docs/overrides.rst, "Mistakes change nothing": an end centuries away
    was stored and enforced, but not logged, and poisoned every later
    change (Redis cannot hold its expiry)."""
    shop(app)
    ratelimit = RateLimit()
    assert "is more than 10 years ahead" in _set_absurdly(app, surface)
    assert ratelimit.overrides(app=app) == []
    assert ratelimit.override_changes(app=app) == []
    ratelimit.block("user:7", duration="7d", app=app)
    assert [c.what for c in ratelimit.override_changes(app=app)] == ["set"]
    assert get(app.test_client(), "/api", user="7").status_code == 429


def test_an_end_stored_past_the_bound_poisons_no_later_change(app: Flask) -> None:
    """An end past the bound already in the hash (written by hand, or by a
    version without the bound) makes the expiry the bound's, and every
    later change is stored, logged and expires with the hash as it should."""
    state = shop(app)
    assert state.throttle is not None
    assert state.overrides is not None
    store, client = state.overrides.store, state.throttle.storage.client
    cli(app, "block", "user:1", "--for", "1h")
    raw = client.execute_command("HGET", store.key, "*\0user:1")
    client.execute_command("HSET", store.key, "*\0user:1", raw.replace(b'"until": ', b'"until": 1e17, "was": '))
    assert "user:7 blocked on every scope" in cli(app, "block", "user:7", "--for", "7d")
    assert "removed: user:7 blocked" in cli(app, "lift", "user:7")
    cli(app, "allow", "user:8", "--for", "7d")
    assert [c.what for c in RateLimit().override_changes(app=app)] == ["set", "removed", "set", "set"]
    left = client.pttl(store.key) / 1000
    assert abs(time.time() + left - (state.overrides.now() + LONGEST)) < 5  # the bound's, not 1e17's


def test_a_change_drops_any_number_of_overrides_whose_time_has_passed(app: Flask, clock: Any) -> None:
    """More ended overrides than Lua's unpack() takes at once (some 8,000)
    are dropped by the next change, which is stored whole."""
    state = shop(app)
    assert state.throttle is not None
    assert state.overrides is not None
    store, client = state.overrides.store, state.throttle.storage.client
    RateLimit().block("user:1", duration="1h", app=app)
    ended = state.overrides.now() - 1
    fields = {f"*\0user:{n}": f'{{"until": {ended}}}' for n in range(2, 10_002)}
    client.execute_command("HSET", store.key, *(part for pair in fields.items() for part in pair))
    RateLimit().block("user:2", duration="1h", app=app)
    assert client.execute_command("HLEN", store.key) == 3  # user:1, user:2 and the version
    assert [o.target for o in RateLimit().overrides(app=app)] == ["user:1", "user:2"]


def test_a_change_is_stored_with_its_log_entry_or_not_at_all(app: Flask) -> None:
    state = shop(app)
    assert state.throttle is not None
    assert state.overrides is not None
    store, client = state.overrides.store, state.throttle.storage.client
    ratelimit = RateLimit()
    ratelimit.block("user:1", duration="1h", app=app)
    client.delete(store.log_key)
    client.set(store.log_key, "not a stream")
    with pytest.raises(StorageUnavailable):
        ratelimit.block("user:2", duration="1h", app=app)
    with pytest.raises(StorageUnavailable):
        ratelimit.remove_overrides("user:1", app=app)
    assert [o.target for o in ratelimit.overrides(app=app)] == ["user:1"]
    assert client.pttl(store.key) > 0


def test_a_failed_override_write_never_opens_the_breaker(app: Flask) -> None:
    """Three failed writes of the overrides opened the breaker of the
    request path, and 6 of 6 requests passed a 2/m limit."""
    state = shop(app, RATELIMIT_BREAKER_THRESHOLD=3, RATELIMIT_IDENTITIES=["ip"])
    assert state.throttle is not None
    assert state.overrides is not None
    state.throttle.storage.client.set(state.overrides.store.key, "not a hash")
    for _ in range(3):
        with pytest.raises(StorageUnavailable):
            RateLimit().block("user:1", duration="1h", app=app)
    assert statuses(app.test_client(), 6) == [200, 200] + [429] * 4


@pytest.mark.parametrize(
    "args",
    [
        ("block", "user:1", "--for", "1h"),
        ("allow", "user:1", "--for", "1h"),
        ("override", "user:1", "5/m", "--for", "1h"),
        ("lift", "user:1"),
        ("lift", "--all"),
    ],
)
@pytest.mark.parametrize("way", ELSEWHERE)
@pytest.mark.parametrize("storage_url", ["memory"], indirect=True)
def test_the_cli_refuses_to_change_overrides_on_memory(app: Flask, args: tuple[str, ...], way: str) -> None:
    """A command run where the app serves no request (the ``flask``
    command, a script with its own group, ``app.cli`` or ``app.cli.main``)
    changes a memory:// store no app server reads: it said every worker
    would follow a block within a second, exited 0, and nothing changed in
    the running app. Only the ``flask`` command was refused, by the group
    that ran it; now any is. Where the app is under test (TESTING), its test
    client serves requests in this process, and the change goes ahead."""
    shop(app, TESTING=False)
    RateLimit().block("user:1", duration="1h", app=app)  # what the app's own process set
    code, output = run_elsewhere(way, app, *args)
    assert code == 2, output
    assert "memory://, which keeps counters and overrides in each process's memory" in output
    assert "Redis (RATELIMIT_STORAGE_URL=redis://...) or local://" in output
    assert [c.what for c in RateLimit().override_changes(app=app)] == ["set"]
    assert [o.describe() for o in RateLimit().overrides(app=app)] == ["user:1 blocked on every scope"]
    app.testing = True
    cli(app, *args)
    assert len(RateLimit().override_changes(app=app)) == 2


@pytest.mark.redis
def test_a_change_a_stalled_redis_cuts_off_says_it_may_still_be_made() -> None:
    """Redis stopped (SIGSTOP) while a block is sent: the command times out
    and exits 1, but Redis may run the change once it wakes up, so the
    message says so and how to see, rather than that nothing changed."""
    server = RedisServer()
    server.start()
    try:
        app = Flask("tests")
        app.config.update(TESTING=True, SECRET_KEY="test", RATELIMIT_STORAGE_URL=server.url)
        shop(app)
        client = app.test_client()
        form = {"csrf_token": token(page(client)), "identity": "user:43", "action": "block", "for": "1h"}
        os.kill(server.pid, signal.SIGSTOP)
        try:
            out = cli(app, "block", "user:42", "--for", "1h", code=1)
            response = client.post(f"{PREFIX}/overrides", data=form, headers={"X-User": "admin"})
        finally:
            os.kill(server.pid, signal.SIGCONT)
        for said in (out, response.text):
            assert "rate limit storage unavailable" in said
            assert "may have reached Redis all the same" in said
            assert "flask ratelimit overrides, or the dashboard" in said
        assert "Traceback" not in out
        assert response.status_code == 503
    finally:
        server.close()


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


#: Fields as another version might leave them in a rolling upgrade, or a
#: hand might write them: each badly typed in one part.
UNREADABLE = {
    "*\0user:1": {"target": 12345},
    "*\0user:2": {"target": "user:2", "scope": ["a"]},
    "*\0ip:zzz/24": {"target": "ip:zzz/24", "network": True},
    "*\0user:3": {"target": "user:3", "network": "yes"},
    "*\0user:4": {"target": "user:4", "until": "tomorrow"},
    "*\0user:5": {"target": "user:5", "action": "limit", "limit": 5},
    "*\0user:6": {"target": "user:6", "action": "smite"},
}


def write_fields(state: RateLimitState, fields: dict[str, str]) -> None:
    """Write raw fields into the overrides' hash, and change its version, as another writer would."""
    assert state.overrides is not None
    store = state.overrides.store
    pairs = [part for item in fields.items() for part in item]
    store.client.execute_command("HSET", store.key, *pairs, "~version", f"by-hand-{len(pairs)}")


@pytest.mark.parametrize("storage_url", ["memory", "redis", "cluster"], indirect=True)
def test_a_badly_typed_field_is_skipped_and_logged_once_and_every_other_override_stays(
    app: Flask, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notices, "WARNING_INTERVAL", 0.0)  # each change's warning is seen
    state = shop(app)
    assert state.overrides is not None
    follower = state.overrides.follower
    follower.monotonic = monotonic = FakeMonotonic()
    client = app.test_client()
    cli(app, "block", "user:42", "--for", "1h")
    until = state.overrides.now() + 3600
    base = {"action": "block", "scope": None, "until": until, "limit": "", "network": False, "by": "x", "at": 0.0}
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        write_fields(state, {name: json.dumps({**base, **part}) for name, part in UNREADABLE.items()})
        monotonic.now += 1.0
        assert get(client, "/api", user="42").status_code == 429  # the block set before stays
        output = cli(app, "block", "user:43", "--for", "1h")
        assert "blocked" in output
        assert get(client, "/api", user="43").status_code == 429  # and one set after is in force
        assert statuses(client, 3, ip="192.0.2.50") == [200, 200, 429]
        for _ in range(3):  # read again, unchanged: not logged again
            monotonic.now += 1.0
            get(client, "/api", user="42")
        warnings = [r.getMessage() for r in extension_records(caplog) if "cannot be read" in r.getMessage()]
    # Logged when first read, and when the block after it changed the overrides.
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("7 stored override(s) cannot be read and are skipped")
    for said in ("target 12345", 'scope ["a"]', "zzz/24", 'network "yes"', 'end "tomorrow"'):
        assert said in warnings[0]
    assert "its limit 5 is not text" in warnings[0]
    assert 'action "smite"' in warnings[0]
    listed = cli(app, "overrides")
    assert "user:42" in listed
    assert "user:43" in listed
    assert "12345" not in listed


#: A good field's end, and what follows it.
REST = b'"limit": "", "network": false, "by": "x", "at": 0}'


def test_an_unreadable_field_of_a_hash_with_no_version_is_logged_too(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    state = shop(app)
    assert state.overrides is not None
    store = state.overrides.store
    store.client.execute_command("HSET", store.key, "*\0user:1", '{"target": 12345}')  # by hand: no version
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(app.test_client(), "/api", user="1").status_code == 200
        state.overrides.table()  # read again, unchanged
    warnings = [r.getMessage() for r in extension_records(caplog) if "cannot be read" in r.getMessage()]
    assert len(warnings) == 1
    assert "its action null" in warnings[0]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b'"a string"', "not a JSON object"),
        (b'{"action": "block", "target": "user:1", "scope": null, "until": NaN, ' + REST, "its end NaN"),
        (b'{"action": "block", "target": "user:1", "scope": null, "until": Infinity, ' + REST, "its end Infinity"),
        (b'{"action": "block", "target": "user:1", "scope": null, "until": true, ' + REST, "its end true"),
        (b'{"action": "limit", "target": "user:1", "scope": null, "until": 1e12, ' + REST, "has no layers"),
        (b'{"action": "block", "target": "user", "scope": null, "until": 1e12, ' + REST, 'target "user"'),
        (
            b'{"action": "block", "target": "user:1", "scope": null, "until": 1e12, "limit": "", "network": 1}',
            "network 1",
        ),
        (
            b'{"action": "block", "target": "user:1", "scope": null, "until": 1e12, "limit": "", "network": true}',
            "not of IP",
        ),
        (
            b'{"action": "block", "target": "ip:fe80::%eth0/64", "scope": null, "until": 1e12, "limit": "", '
            b'"network": true}',
            "zone id",
        ),
    ],
)
def test_a_field_that_cannot_be_read_says_why(raw: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        Override.read(raw)
    table = OverrideTable([], 0.0)
    assert table.find(Identity("user", "1"), "api") is None


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


def test_python_names_a_bad_author_or_scope_and_stores_nothing(app: Flask) -> None:
    """by=5 failed in the middle of storing with "'int' object is not
    subscriptable"; remove_overrides(by=5) logged an author of 5, and its
    scope=5 removed nothing without a word."""
    shop(app)
    ratelimit = RateLimit()
    for set_one in (ratelimit.allow, ratelimit.block):
        with pytest.raises(ValueError, match=r"^by 5 must be a string: who made the change"):
            set_one("user:1", duration="1h", by=5, app=app)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^by \[\] must be a string"):
        ratelimit.override("user:1", "3/m", duration="1h", by=[], app=app)  # type: ignore[arg-type]
    ratelimit.block("user:1", duration="1h", app=app)
    with pytest.raises(ValueError, match=r"^by 5 must be a string"):
        ratelimit.remove_overrides("user:1", by=5, app=app)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^scope 5 must be a non-empty string, or None for every scope"):
        ratelimit.remove_overrides("user:1", scope=5, app=app)  # type: ignore[arg-type]
    assert [(o.target, o.by) for o in ratelimit.overrides(app=app)] == [("user:1", "python")]
    assert [c.what for c in ratelimit.override_changes(app=app)] == ["set"]


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


def test_python_takes_an_identity_object_and_a_datetime_end_naive_as_utc(app: Flask) -> None:
    shop(app)
    ratelimit = RateLimit()
    client = app.test_client()
    ends = datetime(2027, 6, 1, 12, 0)  # naive: UTC
    made = ratelimit.override(Identity("user", "42"), "3/m", scope="api", until=ends, app=app)
    assert (made.target, made.until) == ("user:42", ends.replace(tzinfo=timezone.utc).timestamp())
    assert [get(client, "/api", ip=f"192.0.2.{n}", user="42").status_code for n in range(4)] == [200] * 3 + [429]
    aware = datetime(2027, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert ratelimit.block(Identity("user", "7"), until=aware, app=app).until == made.until


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({"until": "2h"}, "until '2h' is a span: give it as the duration"),
        ({"until": [2027]}, r"until \[2027\] is not a time"),
        ({"until": float("nan")}, "until nan is not a time"),
        ({"duration": [3600]}, r"duration \[3600\] is not a span such as 2h, a number of seconds, or a timedelta"),
    ],
)
def test_python_names_an_end_that_is_not_a_time_or_a_span_and_stores_nothing(
    app: Flask, when: dict[str, Any], message: str
) -> None:
    shop(app)
    ratelimit = RateLimit()
    with pytest.raises(ValueError, match=message):
        ratelimit.block("user:1", app=app, **when)
    assert ratelimit.overrides(app=app) == []


def test_a_block_or_an_allow_takes_no_limit(app: Flask) -> None:
    state = shop(app)
    for action in ("block", "allow"):
        with pytest.raises(ValueError, match=f"^a {action} takes no limit, but '5/m' was given$"):
            set_override(state, action, "user:1", "5/m", duration="1h", by="test")
    assert RateLimit().overrides(app=app) == []


def test_every_override_call_on_a_disabled_app_says_it_is_disabled(app: Flask) -> None:
    shop(app, RATELIMIT_ENABLED=False)
    ratelimit = RateLimit()
    calls = (
        lambda: ratelimit.overrides(app=app),
        lambda: ratelimit.override_changes(app=app),
        lambda: ratelimit.block("user:1", duration="1h", app=app),
        lambda: ratelimit.remove_overrides("user:1", app=app),
    )
    for call in calls:
        with pytest.raises(RuntimeError, match=re.escape(DISABLED)):
            call()


def test_the_dashboard_s_forms_on_a_disabled_app_answer_400_saying_so(app: Flask) -> None:
    """A form from a page an enabled worker served, posted to a disabled one."""
    shop(app, RATELIMIT_ENABLED=False)
    client = app.test_client()
    with client.session_transaction() as session:
        session[dashboard.SESSION_KEY] = csrf = "a token"
    forms = {
        "overrides": {"identity": "user:1", "action": "block", "for": "1h"},
        "overrides/remove": {"target": "user:1"},
    }
    for path, form in forms.items():
        response = client.post(f"{PREFIX}/{path}", data=form | {"csrf_token": csrf}, headers={"X-User": "admin"})
        assert response.status_code == 400
        assert "rate limiting is disabled on this app (RATELIMIT_ENABLED is False)" in response.text


def test_lift_needs_an_identity_or_all_but_not_both(app: Flask) -> None:
    shop(app)
    cli(app, "block", "user:1", "--for", "1h")
    for args in ((), ("user:1", "--all")):
        assert "name an IDENTITY, or give --all to remove every override" in cli(app, "lift", *args, code=2)
    assert "user:1" in cli(app, "overrides")


def test_lift_says_when_nothing_matches(app: Flask) -> None:
    shop(app)
    cli(app, "block", "user:1", "--for", "1h", "--scope", "api")
    assert cli(app, "lift", "user:2") == "No such override; nothing removed.\n"
    assert cli(app, "lift", "user:1", "--scope", "other") == "No such override; nothing removed.\n"
    assert "user:1" in cli(app, "overrides")


def test_a_client_whose_address_is_none_is_limited_as_before_beside_a_network_s_override(app: Flask) -> None:
    """What a proxy or a server sent as the address, when it is not one, is
    in no network: the request is decided by its own limits, never a 500."""
    shop(app)
    RateLimit().block("ip:203.0.113.0/24", duration="1h", app=app)
    client = app.test_client()
    assert statuses(client, 3, ip="unknown") == [200, 200, 429]
    assert statuses(client, 1, ip="203.0.113.9") == [429]


def test_python_names_a_target_that_is_no_identity_and_stores_nothing(app: Flask) -> None:
    shop(app)
    ratelimit = RateLimit()
    ratelimit.block("user:1", duration="1h", app=app)
    message = r"^5 is not an identity: write ip:<address or network>, user:<id> or <key>:<value>$"
    with pytest.raises(ValueError, match=message):
        ratelimit.block(5, duration="1h", app=app)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        ratelimit.remove_overrides(5, app=app)  # type: ignore[arg-type]
    assert [o.target for o in ratelimit.overrides(app=app)] == ["user:1"]
