"""Hostile clients against a redis_client redis-server: key sprays, forged forwarding
headers, identities chosen to break keys, and secrets in logs."""

from __future__ import annotations

import gc
import ipaddress
import logging
import re
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask, Request
from helpers import add_login, get, install
from werkzeug.middleware.proxy_fix import ProxyFix

from flask_redis_throttle import ConfigurationError, limit
from flask_redis_throttle.core.engine.keys import identity_tag
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.core.stores.refusals import MAX_VALUE_LENGTH
from flask_redis_throttle.testing import free_port

#: Every key the extension writes, but for the refusal log: the prefix, a
#: 22-character digest in the hash tag, a scope in safe characters, the
#: strategy's code and the window.
KEY = re.compile(r"rl:\{(ip|user|key):[A-Za-z0-9_-]{22}\}:[A-Za-z0-9._/@+%-]+:(fw|sw|sl|gc)")
REFUSALS = b"rl:refusals"
WINDOW_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@pytest.fixture
def redis_app(redis_server: Any, redis_client: redis.Redis) -> Flask:
    """An app on the session's redis_client server, emptied first."""
    app = Flask("security")
    app.config.update(TESTING=True, SECRET_KEY="test", RATELIMIT_STORAGE_URL=redis_server.url)
    return app


def all_keys(client: redis.Redis) -> list[bytes]:
    return list(client.scan_iter(count=1000))


def counter_keys(client: redis.Redis) -> list[str]:
    keys = [key.decode("ascii") for key in all_keys(client) if key != REFUSALS]
    for key in keys:
        assert KEY.fullmatch(key), key
    return keys


def ttl_bound_ms(window: str, strategy: str) -> int:
    """The longest TTL a key may have: its longest layer's window and one
    second of slack, and a tenth more for the sliding window's extra sub-bucket."""
    period = int(window[:-1]) * WINDOW_MS[window[-1]]
    return (period * 11 // 10 if strategy == "sliding-window" else period) + 1_000


def used_memory(client: redis.Redis) -> int:
    memory: int = client.info("memory")["used_memory"]
    return memory


def addresses(count: int, start: str = "198.18.0.0") -> Iterator[str]:
    """``count`` distinct IPv4 addresses, from the benchmarking range."""
    first = int(ipaddress.IPv4Address(start))
    return (str(ipaddress.IPv4Address(first + n)) for n in range(count))


def spray(client: Any, anonymous: int, logged_in: int) -> list[int]:
    """One request from each of ``anonymous`` new addresses, then one from
    each of ``logged_in`` new users, each from a new address too."""
    ips = addresses(anonymous + logged_in)
    statuses = [get(client, ip=next(ips)).status_code for _ in range(anonymous)]
    statuses += [get(client, ip=next(ips), user=f"spray-{n}").status_code for n in range(logged_in)]
    return statuses


def spray_app(app: Flask, spec: str, strategy: str = "fixed-window", **config: Any) -> None:
    add_login(app)

    @app.get("/")
    @limit(spec, strategy=strategy)
    def index() -> str:
        return "ok"

    install(app, **config)


@pytest.mark.redis
def test_a_key_spray_costs_one_expiring_key_per_identity(redis_app: Flask, redis_client: redis.Redis) -> None:
    # Minutes and hours: the spray takes seconds, and keys expire on Redis's
    # real clock even though decisions are pinned, so a one-second layer's
    # first keys would be gone before the end.
    spray_app(redis_app, "5/m;10/h", RATELIMIT_REFUSAL_LOG_SIZE=10)
    client = redis_app.test_client()
    get(client, ip="192.0.2.1")  # connects and loads the script
    redis_client.flushdb()
    before = used_memory(redis_client)
    anonymous, logged_in = 1500, 1500
    assert spray(client, anonymous, logged_in) == [200] * 3000
    identities = anonymous + 2 * logged_in  # a logged-in request is its IP and its user
    # Exactly one key per identity, whatever its layers: nothing else per request.
    assert redis_client.dbsize() == identities
    keys = counter_keys(redis_client)
    assert len({key.split("}")[0] for key in keys}) == identities
    # Each has a TTL no longer than its longest window and a second.
    pipe = redis_client.pipeline(transaction=False)
    for key in keys:
        pipe.pttl(key)
    for key, ttl in zip(keys, pipe.execute(), strict=True):
        assert 0 < ttl <= ttl_bound_ms("1h", "fixed-window"), (key, ttl)
    per_identity = (used_memory(redis_client) - before) / identities
    assert per_identity < 1024
    # The same identities again add nothing.
    size = redis_client.dbsize()
    ips = addresses(100)
    assert [get(client, ip=next(ips)).status_code for _ in range(100)] == [200] * 100
    assert redis_client.dbsize() == size
    # Refusals add a single key, the refusal log, capped at its size.
    for ip in addresses(20, "198.51.100.0"):
        assert [get(client, ip=ip).status_code for _ in range(6)] == [200] * 5 + [429]
    assert redis_client.dbsize() == size + 20 + 1
    assert redis_client.xlen(REFUSALS) == 10


@pytest.mark.redis
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_keeps_one_expiring_key_per_identity(
    redis_app: Flask, redis_client: redis.Redis, strategy: str
) -> None:
    spray_app(redis_app, "5/m;10/h;100/d", strategy)
    client = redis_app.test_client()
    get(client, ip="192.0.2.1")
    redis_client.flushdb()
    before = used_memory(redis_client)
    assert spray(client, 200, 100) == [200] * 300
    counters = 200 + 2 * 100
    assert redis_client.dbsize() == counters
    keys = counter_keys(redis_client)
    pipe = redis_client.pipeline(transaction=False)
    for key in keys:
        pipe.pttl(key)
    for key, ttl in zip(keys, pipe.execute(), strict=True):
        assert 0 < ttl <= ttl_bound_ms("1d", strategy), (key, ttl)
    assert (used_memory(redis_client) - before) / counters < 1024


@pytest.mark.redis
@pytest.mark.real_clock
def test_keys_expire_on_the_real_clock(redis_app: Flask, redis_client: redis.Redis) -> None:
    add_login(redis_app)
    for strategy in STRATEGIES:

        @redis_app.get(f"/{strategy}", endpoint=strategy)
        @limit("2/s", strategy=strategy)
        def view() -> str:
            return "ok"

    install(redis_app)
    client = redis_app.test_client()
    for ip in addresses(25):
        for strategy in STRATEGIES:
            # Five at once: at most four fit, even across a second's end.
            statuses = [get(client, f"/{strategy}", ip=ip, user=ip).status_code for _ in range(5)]
            assert 429 in statuses
        # Counted right after its requests, before any of its keys can expire
        # (the spray as a whole may outlast the first keys on a loaded machine):
        # exactly one key per strategy for the IP, and one for the user.
        mine = [f"rl:{{{identity_tag(kind, ip)}}}:*" for kind in ("ip", "user")]
        assert sorted(len(redis_client.keys(pattern)) for pattern in mine) == [len(STRATEGIES)] * 2
    last = time.monotonic()
    # Every counter lives at most 1.1 s past its 1 s window's end; then the
    # refusal log alone is left.
    while redis_client.dbsize() > 1:
        assert time.monotonic() - last < 5, redis_client.dbsize()
        time.sleep(0.1)
    assert all_keys(redis_client) == [REFUSALS]


@pytest.mark.redis
def test_forged_forwarding_headers_cannot_escape_the_limit(redis_app: Flask, redis_client: redis.Redis) -> None:
    @redis_app.get("/")
    @limit("5/m")
    def index() -> str:
        return "ok"

    install(redis_app)
    client = redis_app.test_client()
    forged = addresses(40 * 100)
    statuses = []
    for n in range(40):
        hops = ", ".join(next(forged) for _ in range(100))
        headers = {
            "X-Forwarded-For": hops,
            "X-Real-IP": f"203.0.113.{n}",
            "Forwarded": f"for=203.0.113.{n};proto=https",
            "True-Client-IP": f"203.0.113.{n}",
            "CF-Connecting-IP": f"203.0.113.{n}",
            "X-Client-IP": f"203.0.113.{n}",
        }
        statuses.append(get(client, ip="192.0.2.1", headers=headers).status_code)
    assert statuses == [200] * 5 + [429] * 35
    # One identity, the socket's address: one counter.
    assert len(counter_keys(redis_client)) == 1


def proxied(app: Flask, x_for: int = 1, spec: str = "2/m") -> Any:
    """An app behind ``x_for`` trusted proxies, limited by IP only."""
    app.wsgi_app = ProxyFix(app.wsgi_app, x_for=x_for)

    @app.get("/")
    @limit(spec, identities=["ip"])
    def index() -> str:
        return "ok"

    install(app)
    return app.test_client()


def through_proxy(client: Any, client_ip: str, forged: str | None = None, proxy: str = "10.0.0.1") -> int:
    """A request as one proxy passes it on: the client's own X-Forwarded-For,
    if it sent one, with the address the proxy saw appended."""
    hops = f"{forged}, {client_ip}" if forged else client_ip
    return int(get(client, ip=proxy, headers={"X-Forwarded-For": hops}).status_code)


def test_proxy_fix_counts_the_last_hop_only(app: Flask) -> None:
    client = proxied(app, x_for=1)
    forgeries = [None, "203.0.113.1", "203.0.113.2, 203.0.113.3", ", ".join(addresses(50)), "garbage", "::1"]
    assert [through_proxy(client, "192.0.2.7", forged) for forged in forgeries] == [200, 200] + [429] * 4
    assert through_proxy(client, "192.0.2.8", "192.0.2.7") == 200  # another client behind the same proxy
    # Straight from the proxy, with no header, the proxy is the client.
    assert get(client, ip="10.0.0.1").status_code == 200


def test_proxy_fix_trusting_more_hops_than_there_are_proxies_lets_clients_choose(app: Flask) -> None:
    # Why x_for must be the number of proxies, no more: with one proxy and
    # x_for=2, the hop before the proxy's is the client's own invention.
    client = proxied(app, x_for=2)
    assert [through_proxy(client, "192.0.2.7", f"203.0.113.{n}") for n in range(6)] == [200] * 6


def test_proxy_fix_with_ipv6_clients_groups_by_network(app: Flask) -> None:
    client = proxied(app, x_for=1, spec="1/m")
    assert through_proxy(client, "2001:db8:1:2::1") == 200
    assert through_proxy(client, "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:9::1") == 429  # same /64
    assert through_proxy(client, "2001:db8:1:3::1", "2001:db8:1:2::1") == 200  # another /64
    assert through_proxy(client, "::ffff:192.0.2.9") == 200
    assert through_proxy(client, "192.0.2.9") == 429  # the same IPv4 client


#: Values a key function may be handed by a client: long, strange, and
#: looking like keys.
HOSTILE = [
    "x" * 1_000_000,
    "x" * 1_000_000 + "y",
    "é☃😀" * 10_000,
    "\x00\r\n\t\x1b[31m\x7f",
    "\x00\r\n\t\x1b[31m\x7e",
    "{evil}",
    "}{",
    "a}b{c",
    "rl:{ip:AAAAAAAAAAAAAAAAAAAAAA}:index:fw:1m",
    "%7B%7D",
    "\ud800",
    "",
    " ",
]
#: User ids, through a header, so ASCII and Latin-1 only.
HOSTILE_USERS = ["{admin}", "}" * 100, "a:b}{c", "x" * 8000, "ü", "0", "00"]
#: Addresses as a server may report them: zones are dropped, so every one of
#: these is the network fe80::/64.
ZONED = ["fe80::1%eth0", "fe80::2%eth1", "fe80::1%{evil}", "fe80::1%" + "z" * 1000, "fe80::3%25", "fe80::1%\x00"]
#: Not addresses at all: each counts under its own text.
NOT_ADDRESSES = ["{}:::garbage", ":" * 300, "1.2.3.4%eth0"]


def hostile_key(request: Request) -> str:
    return HOSTILE[int(request.args["i"])]


@pytest.mark.redis
def test_hostile_identities_are_limited_under_short_safe_keys(redis_app: Flask, redis_client: redis.Redis) -> None:
    add_login(redis_app)

    @redis_app.get("/key")
    @limit("2/m", identities=[hostile_key])
    def by_key() -> str:
        return "ok"

    @redis_app.get("/user")
    @limit("2/m", identities=["user"])
    def by_user() -> str:
        return "ok"

    @redis_app.get("/ip")
    @limit("2/m", identities=["ip"])
    def by_ip() -> str:
        return "ok"

    install(redis_app)
    client = redis_app.test_client()
    for i in range(len(HOSTILE)):
        assert [get(client, "/key", query_string={"i": i}).status_code for _ in range(3)] == [200, 200, 429], i
    for user in HOSTILE_USERS:
        assert [get(client, "/user", user=user).status_code for _ in range(3)] == [200, 200, 429], user
    # A zone cannot take a client out of its network.
    assert [get(client, "/ip", ip=address).status_code for address in ZONED] == [200, 200] + [429] * 4
    for address in NOT_ADDRESSES:
        assert [get(client, "/ip", ip=address).status_code for _ in range(3)] == [200, 200, 429], address

    keys = counter_keys(redis_client)  # each matches KEY
    assert len(keys) == len(HOSTILE) + len(HOSTILE_USERS) + 1 + len(NOT_ADDRESSES)
    assert max(map(len, keys)) <= 48
    # The refusal log cuts what it keeps of each identity.
    # (The zoned network's later refusals come from the block cache, which
    # logs nothing: it logged its first.)
    entries = redis_client.xrange(REFUSALS)
    assert len(entries) == len(HOSTILE) + len(HOSTILE_USERS) + 1 + len(NOT_ADDRESSES)
    for _id, fields in entries:
        # A lone surrogate is kept as its escape, "\\ud800".
        assert len(fields[b"identity"].decode()) <= MAX_VALUE_LENGTH + 5, fields
    assert redis_client.memory_usage(REFUSALS) < 32 * 1024


def test_warnings_never_show_the_redis_password(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    url = f"redis://limiter:hunter2@127.0.0.1:{port}/0"  # nothing listens there
    app = Flask("security")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=url)

    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(app.test_client()).status_code == 200
    [message] = [record.getMessage() for record in caplog.records]
    assert f"127.0.0.1:{port}" in message  # where, still
    assert "hunter2" not in message


def test_configuration_errors_never_show_the_redis_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Storage.from_url("redis://limiter:hunter2@127.0.0.1:not-a-port/0")
    assert "127.0.0.1" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.redis
def test_huge_identities_are_not_kept_in_memory(redis_app: Flask) -> None:
    # A key function may hand over what a client sent, such as a field of a
    # JSON body. Once its request is done, nothing of it may stay behind in
    # the process, or a client could fill a worker's memory.
    @redis_app.post("/")
    @limit("1/m", identities=[body_key])
    def index() -> str:
        return "ok"

    install(redis_app)
    client = redis_app.test_client()
    client.post("/", data="warm-up")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(50):
            assert client.post("/", data=f"{n:04d}" + "x" * 100_000).status_code == 200
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained < 500_000  # fifty bodies are 5 MB


def body_key(request: Request) -> str:
    return request.get_data(as_text=True)
