"""Odd and hostile identities through a real app: addresses with ports and
brackets, users whose ids are broken, addresses that are not addresses, and
request values in log lines."""

from __future__ import annotations

import ipaddress
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from flask import Flask, Request, request
from flask_login import LoginManager, UserMixin
from helpers import flask_command, get, install
from werkzeug.middleware.proxy_fix import ProxyFix

from flask_redis_throttle import Identity, limit
from flask_redis_throttle._request import identity
from flask_redis_throttle._request.identity import parse_identity
from flask_redis_throttle.core.engine.keys import CACHED_VALUE_LENGTH, MAX_VALUE_LENGTH, loggable

#: How long a warning may be besides the request value it quotes.
MESSAGE_TEXT = 300


def ip_app(app: Flask, spec: str = "2/m", x_for: int = 1) -> Any:
    """An app behind one proxy, limited by IP only."""
    app.wsgi_app = ProxyFix(app.wsgi_app, x_for=x_for)  # type: ignore[method-assign]

    @app.get("/")
    @limit(spec, identities=["ip"])
    def index() -> str:
        return "ok"

    install(app)
    return app.test_client()


def forwarded(client: Any, hop: str) -> int:
    """A request whose proxy says it came from ``hop``."""
    return int(get(client, ip="10.0.0.1", headers={"X-Forwarded-For": hop}).status_code)


def test_ports_in_forwarded_addresses_share_one_counter(app: Flask) -> None:
    client = ip_app(app)
    hops = ["203.0.113.5:40000", "203.0.113.5:40001", "203.0.113.5", "203.0.113.5:443"]
    assert [forwarded(client, hop) for hop in hops] == [200, 200, 429, 429]
    assert forwarded(client, "203.0.113.6:40000") == 200  # another client


def test_bracketed_ipv6_addresses_are_grouped_by_network(app: Flask) -> None:
    client = ip_app(app)
    hops = ["[2001:db8::1]:443", "[2001:db8::2]", "2001:db8::3", "[2001:db8::ffff]:40000", "[2001:db8::1%eth0]:80"]
    assert [forwarded(client, hop) for hop in hops] == [200, 200, 429, 429, 429]  # one /64
    assert forwarded(client, "[2001:db8:0:1::1]:443") == 200  # another /64
    assert forwarded(client, "[::ffff:198.51.100.9]:443") == 200
    assert forwarded(client, "198.51.100.9:80") == 200
    assert forwarded(client, "198.51.100.9") == 429  # the same IPv4 client, three ways


def test_ports_and_brackets_in_remote_addr(app: Flask) -> None:
    client = ip_app(app, x_for=0)
    assert [get(client, ip=ip).status_code for ip in ("192.0.2.7:1", "192.0.2.7:65535", "192.0.2.7")] == [
        200,
        200,
        429,
    ]
    assert [get(client, ip=ip).status_code for ip in ("[2001:db8:7::1]:80", "[2001:db8:7::2]", "2001:db8:7::3")] == [
        200,
        200,
        429,
    ]


#: Not addresses with a port: each counts under its own text.
NOT_PORTS = [
    "192.0.2.7:",
    "192.0.2.7:http",
    "192.0.2.7:1:2",
    "[2001:db8::1]x",
    "[2001:db8::1",
    "[garbage]:80",
    "[192.0.2.7%eth0]:80",
]


def test_text_that_is_not_an_address_with_a_port_counts_as_it_is(app: Flask) -> None:
    client = ip_app(app, x_for=0)
    assert get(client, ip="192.0.2.7").status_code == 200
    for text in NOT_PORTS:
        assert [get(client, ip=text).status_code for _ in range(3)] == [200, 200, 429], text
    assert get(client, ip="192.0.2.7").status_code == 200  # none of them counted as 192.0.2.7


def test_the_cli_reads_addresses_as_requests_are_counted() -> None:
    assert str(parse_identity("ip:203.0.113.5:40000", 64)) == "ip:203.0.113.5"
    assert str(parse_identity("ip:[2001:db8::1]:443", 64)) == "ip:2001:db8::/64"
    assert str(parse_identity("ip:[2001:db8::1]", 64)) == "ip:2001:db8::/64"
    assert str(parse_identity("ip:2001:db8::/64", 64)) == "ip:2001:db8::/64"
    with pytest.raises(ValueError, match="is not an IP address"):
        parse_identity("ip:203.0.113.5:http", 64)


def test_the_address_cache_keeps_only_short_valid_addresses() -> None:
    # What is cached does not depend on the storage: memory:// only.
    app = Flask("cache")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL="memory://")
    client = ip_app(app, spec="1000000/m", x_for=0)
    group = identity.address_group
    group.cache_clear()
    # Not addresses, however long: never cached.
    for n in range(300):
        assert get(client, ip=f"{n}:" + "f" * 50_000).status_code == 200
        assert get(client, ip=f"2001:db8::{n}:zz").status_code == 200
        assert get(client, ip=f"[{n}" + "0" * 50_000 + "]:80").status_code == 200
    assert group.cache_info().currsize == 0
    # A zone of any length: the address is cached without it, once.
    for n in range(300):
        assert get(client, ip="fe80::1%" + str(n) * 20_000).status_code == 200
    assert group.cache_info().currsize == 1
    # Valid addresses: no more than the cache's size. Filled the way a
    # request reads its address, without the app: 4,000 requests on
    # memory:// would only make the test slow.
    size = group.cache_info().maxsize
    assert size is not None
    for n in range(size + 100):
        network = f"2001:db8:{n // 65536:x}:{n % 65536:x}::"
        assert identity._client_address(f"[{network}1]:443", 64) == str(ipaddress.ip_network(network + "/64"))
    assert group.cache_info().currsize == size
    assert get(client, ip="2001:db8:ffff:1::1").status_code == 200
    assert group.cache_info().currsize == size


def test_the_identity_cache_is_bounded_and_keeps_no_long_values() -> None:
    """Identities are kept by kind and value, so that a returning client
    costs one lookup; a flood of new ones does not grow the cache past its
    bound, and a value too long to keep is made afresh."""
    # What is cached does not depend on the storage: memory:// only.
    app = Flask("cache")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL="memory://")

    def token(req: Request) -> str:
        return req.headers["X-Token"]

    @app.get("/")
    @limit("1000000/m", identities=["ip", token])
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    known = identity._known
    known.cache_clear()
    for _ in range(2):
        assert get(client, ip="198.51.100.1", headers={"X-Token": "a"}).status_code == 200
    assert known.cache_info().currsize == 2
    long_token = "t" * (CACHED_VALUE_LENGTH + 1)
    assert get(client, ip="198.51.100.1", headers={"X-Token": long_token}).status_code == 200
    assert known.cache_info().currsize == 2
    # Filled the way requests fill it, without the app: thousands of
    # requests would only make the test slow.
    [resolve] = identity.resolvers(["ip"], 64, False)
    for n in range(identity.IDENTITY_CACHE_SIZE + 100):
        address = f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"
        assert resolve(SimpleNamespace(remote_addr=address)) == Identity("ip", address)  # type: ignore[arg-type]
    assert known.cache_info().currsize == identity.IDENTITY_CACHE_SIZE


class Broken(UserMixin):
    """A logged-in user whose id cannot be had: ``get_id()`` raises, or
    returns None."""

    def __init__(self, how: str) -> None:
        self.how = how

    def get_id(self) -> str | None:
        if self.how == "raises":
            raise LookupError("no id in the session\nforged: line " + "x" * 1_000_000)
        return None


class Named(UserMixin):
    def __init__(self, user_id: str) -> None:
        self.id = user_id


def user_app(app: Flask, identities: list[str]) -> Any:
    """Users from an ``X-User`` header; ``raises`` and ``none`` are broken,
    and ``unloadable`` makes the user loader raise."""
    manager = LoginManager(app)

    @manager.request_loader
    def load(req: Request) -> UserMixin | None:
        name = request.headers.get("X-User")
        if name == "unloadable":
            raise ConnectionError("the user database is down")
        if name in ("raises", "none"):
            return Broken(name)
        return Named(name) if name else None

    @app.get("/")
    @limit("2/m", identities=identities)
    def index() -> str:
        return "ok"

    install(app)
    return app.test_client()


def identity_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "counted as anonymous" in record.getMessage()]


#: Each broken user, and what its warning says.
BROKEN = {
    "raises": "current_user.get_id() raised LookupError",
    "none": "current_user.get_id() returned None for a logged-in user",
    "unloadable": "current_user.is_authenticated raised ConnectionError",
}


@pytest.mark.parametrize("how", list(BROKEN))
def test_a_user_without_an_id_counts_as_anonymous(app: Flask, caplog: pytest.LogCaptureFixture, how: str) -> None:
    client = user_app(app, ["user-or-ip"])
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        # Counted by IP: two pass, the third is refused, whoever else asks.
        assert [get(client, user=how, ip="192.0.2.1").status_code for _ in range(3)] == [200, 200, 429]
        assert get(client, ip="192.0.2.1").status_code == 429  # anonymous, from the same IP
        # The user "None" is someone else, with a quota of their own.
        assert [get(client, user="None", ip="192.0.2.2").status_code for _ in range(3)] == [200, 200, 429]
    [warning] = identity_warnings(caplog)  # one, however many requests
    assert BROKEN[how] in warning
    assert "anonymous" in warning
    assert "\n" not in warning
    assert len(warning) <= MAX_VALUE_LENGTH + MESSAGE_TEXT


def test_a_user_only_limit_leaves_a_user_without_an_id_alone(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    client = user_app(app, ["user"])
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [get(client, user="raises").status_code for _ in range(3)] == [200] * 3
        assert [get(client, user="None").status_code for _ in range(3)] == [200, 200, 429]
    assert len(identity_warnings(caplog)) == 1


#: A request value that would forge a log line, and make a megabyte of one.
HOSTILE = "evil\nWARNING forged line\r\x1b[31m" + "x" * 1_000_000


def assert_one_short_line(message: str) -> None:
    for control in "\n\r\x1b":
        assert control not in message, message[:400]
    assert len(message) <= MAX_VALUE_LENGTH + MESSAGE_TEXT, len(message)
    assert "evil\\nWARNING forged line\\r\\x1b[31mxxx" in message  # still says what it was


def body(request: Request) -> str:
    return request.get_data(as_text=True)


def test_the_shadow_warning_escapes_and_cuts_the_identity(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    @app.post("/")
    @limit("1/m", identities=[body], shadow=True)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [client.post("/", data=HOSTILE).status_code for _ in range(2)] == [200, 200]
    [warning] = [r.getMessage() for r in caplog.records if "shadow" in r.getMessage()]
    assert_one_short_line(warning)


def test_the_cost_warning_escapes_and_cuts_the_value(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    @app.post("/")
    @limit("5/m", cost=body)
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert app.test_client().post("/", data=HOSTILE).status_code == 200
    [warning] = [r.getMessage() for r in caplog.records if "cost function" in r.getMessage()]
    assert_one_short_line(warning)


def test_the_dynamic_limit_warning_escapes_and_cuts_the_value(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    @app.post("/")
    @limit(body)
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert app.test_client().post("/", data=HOSTILE).status_code == 200
    [warning] = [r.getMessage() for r in caplog.records if "dynamic" in r.getMessage()]
    assert_one_short_line(warning)


def test_the_identity_warning_escapes_and_cuts_the_error(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    client = user_app(app, ["user-or-ip"])
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(client, user="raises").status_code == 200
    [warning] = identity_warnings(caplog)
    assert "\n" not in warning
    assert "no id in the session\\nforged: line xxx" in warning
    assert len(warning) <= MAX_VALUE_LENGTH + MESSAGE_TEXT


def test_the_refusals_command_escapes_identities(app: Flask) -> None:
    @app.post("/")
    @limit("1/m", identities=[body])
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [client.post("/", data=HOSTILE).status_code for _ in range(2)] == [200, 429]
    result = flask_command(app, "ratelimit", "refusals")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "\r" not in result.output
    lines = result.output.splitlines()
    # A title, a header and one row for each table, a blank line between.
    assert len(lines) == 7, lines
    assert all(len(line) < 2 * MAX_VALUE_LENGTH + MESSAGE_TEXT for line in lines)
    assert "evil\\nWARNING forged line\\r\\x1b[31mxxx" in lines[2]


@pytest.mark.parametrize(
    ("value", "logged"),
    [
        ("ip:192.0.2.1", "ip:192.0.2.1"),
        ("é☃😀 it's \\n", "é☃😀 it's \\n"),  # printable, backslashes included, stay
        ("a\nb\r\tc\x1b\x7f\x85\u2028\ud800", "a\\nb\\r\\tc\\x1b\\x7f\\x85\\u2028\\ud800"),
        ("x" * MAX_VALUE_LENGTH, "x" * MAX_VALUE_LENGTH),
        ("x" * (MAX_VALUE_LENGTH + 1), "x" * (MAX_VALUE_LENGTH - 1) + "…"),
        ("\n" * 1_000_000, "\\n" * (MAX_VALUE_LENGTH // 2 - 1) + "\\…"),
    ],
)
def test_loggable_values_are_one_short_line(value: str, logged: str) -> None:
    assert loggable(value) == logged
    assert len(loggable(value)) <= MAX_VALUE_LENGTH
