"""Faults injected into real redis-server processes while requests arrive.

Each test starts a server of its own, puts two apps on it, one failing open
and one failing closed, and breaks the server while threads send requests to
both. Whatever the fault, a request must never be a 500 (the apps run with
``TESTING``, so an exception escaping the extension fails the test outright),
never take longer than :data:`BOUND`, and must get what its app promises:
200 with no ``RateLimit`` headers when failing open, 503 with ``Retry-After``
when failing closed, with one warning per app naming the fault. Once the
fault is gone, limiting must be exact again.

These assertions are about statuses, times and warnings, never about how
often Redis was called, so that they hold with or without a circuit breaker
in front of Redis: :func:`wait_until_decided` waits for the first decided
request, however long a breaker keeps Redis out of the loop.

``tests/test_failure_policy.py`` has the plain cases: refused connections, one
``SCRIPT FLUSH`` and a restart, without concurrent traffic.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from flask import Flask
from helpers import extension_records, get, join_all

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.testing import RedisServer

pytestmark = pytest.mark.redis

#: The longest a request may take while Redis misbehaves, in seconds. The
#: client waits at most 0.5 s for a connection or a reply and retries a
#: broken connection once, at once; the rest is slack for a busy machine.
BOUND = 2.0

#: The socket timeout of apps whose fault fails at once, in seconds.
PATIENT = 1.5

#: How long a decided request may take to come back after a fault ends.
RECOVERY = 15.0

#: The messages each app logs, by RATELIMIT_FAIL_OPEN.
OUTCOMES = {True: "letting requests through", False: "answering 503"}


@dataclass(frozen=True)
class Result:
    status: int
    elapsed: float
    #: Whether Redis decided it: the RateLimit header is only sent then.
    decided: bool
    retry_after: str | None


def timed_get(client: Any, path: str = "/", ip: str = "192.0.2.1") -> Result:
    start = time.monotonic()
    response = get(client, path, ip=ip)
    elapsed = time.monotonic() - start
    return Result(response.status_code, elapsed, "RateLimit" in response.headers, response.headers.get("Retry-After"))


def make_app(url: str, fail_open: bool, stall: bool = False, **config: Any) -> Flask:
    """``/`` takes the traffic under a limit it never reaches; ``/tight``
    (3 a minute) shows whether limiting works.

    For a fault that stalls Redis (``stall``), the app keeps the default
    0.5 s socket timeout, which is what such a test is about. Otherwise it
    waits up to :data:`PATIENT` seconds: the faults fail at once (a kill, a
    refused connection, an error reply), and on a loaded machine a healthy
    reply can take longer than 0.5 s, whose timeout would be logged in the
    fault's place.
    """
    if not stall:
        config.setdefault("RATELIMIT_STORAGE_OPTIONS", {"socket_timeout": PATIENT})
    name = "open" if fail_open else "closed"
    app = Flask(f"faults-{name}")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=url, RATELIMIT_FAIL_OPEN=fail_open)
    app.config.update(RATELIMIT_KEY_PREFIX=f"{name}:", **config)  # the two apps count apart

    @app.get("/")
    @limit("100000/m")
    def index() -> str:
        return "ok"

    @app.get("/tight")
    @limit("3/m")
    def tight() -> str:
        return "ok"

    RateLimit(app)
    return app


@pytest.fixture
def server() -> Iterator[RedisServer]:
    server = RedisServer(["--maxmemory-policy", "noeviction"])
    server.start()
    yield server
    server.close()


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the test's own, patient enough to send ``DEBUG SLEEP 3``."""
    client = redis.Redis.from_url(server.url, socket_timeout=10)
    yield client
    client.close()


@pytest.fixture
def apps(server: RedisServer) -> dict[bool, Flask]:
    """A fail-open and a fail-closed app on the test's server, by RATELIMIT_FAIL_OPEN."""
    return {fail_open: make_app(server.url, fail_open) for fail_open in (True, False)}


@pytest.fixture
def stall_apps(server: RedisServer) -> dict[bool, Flask]:
    """As :func:`apps`, for a fault that stalls Redis: with the default timeouts."""
    return {fail_open: make_app(server.url, fail_open, stall=True) for fail_open in (True, False)}


class Traffic:
    """Threads sending GETs to each app until the block ends, two per app,
    each from an address of its own, recording every response."""

    def __init__(self, apps: dict[bool, Flask], per_app: int = 2) -> None:
        self.results: dict[bool, list[Result]] = {fail_open: [] for fail_open in apps}
        self.errors: list[BaseException] = []
        self._done = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(fail_open, app, f"198.51.100.{10 * fail_open + n}"))
            for fail_open, app in apps.items()
            for n in range(per_app)
        ]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        time.sleep(0.2)  # every thread is under way before the fault
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        join_all(self._threads, deadline=10, what="traffic threads (a request hung)")
        if self.errors:
            raise self.errors[0]

    def _run(self, fail_open: bool, app: Flask, ip: str) -> None:
        client = app.test_client()
        try:
            while not self._done.is_set():
                self.results[fail_open].append(timed_get(client, ip=ip))
        except BaseException as error:  # surfaced in the main thread by __exit__
            self.errors.append(error)


def check_results(results: list[Result], fail_open: bool) -> None:
    """Every response is what the app promises, and none took too long;
    at least one of them met the fault."""
    assert results
    assert max(r.elapsed for r in results) < BOUND
    for r in results:
        if r.decided:
            assert r.status == 200
        elif fail_open:
            assert (r.status, r.retry_after) == (200, None)
        else:
            assert r.status == 503
            # One second, or when a circuit breaker will next try Redis.
            assert r.retry_after is not None
            assert int(r.retry_after) >= 1
    assert not all(r.decided for r in results), "no request met the fault"


def storage_warnings(caplog: pytest.LogCaptureFixture, fail_open: bool) -> list[str]:
    """The storage warnings one of the two apps logged."""
    assert not [r for r in caplog.records if r.levelno > logging.WARNING]
    messages = [r.getMessage() for r in caplog.records if r.name == "flask_redis_throttle"]
    return [m for m in messages if "storage unavailable" in m and OUTCOMES[fail_open] in m]


def wait_until_decided(app: Flask) -> None:
    """Wait until Redis decides requests again, or fail after RECOVERY seconds."""
    client = app.test_client()
    deadline = time.monotonic() + RECOVERY
    while True:
        result = timed_get(client, ip="203.0.113.250")
        assert result.elapsed < BOUND
        if result.decided:
            return
        assert time.monotonic() < deadline, "Redis never decided a request again"
        time.sleep(0.02)


def assert_limiting(app: Flask, ip: str) -> None:
    """Once Redis is back, a fresh client gets exactly its 3 a minute."""
    wait_until_decided(app)
    client = app.test_client()
    assert [timed_get(client, "/tight", ip).status for _ in range(4)] == [200, 200, 200, 429]


def test_killed_during_traffic_then_restarted(
    server: RedisServer, apps: dict[bool, Flask], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"), Traffic(apps) as traffic:
        server.stop()
        time.sleep(0.5)
        server.start()
        time.sleep(0.3)
    for fail_open, app in apps.items():
        check_results(traffic.results[fail_open], fail_open)
        messages = storage_warnings(caplog, fail_open)
        assert len(messages) == 1, messages
        assert re.search(r"connect|closed|reset", messages[0], re.IGNORECASE), messages[0]
        # The restart lost every count; a new client is limited exactly.
        assert_limiting(app, "192.0.2.10")


def test_script_flush_during_traffic(
    admin: redis.Redis, apps: dict[bool, Flask], caplog: pytest.LogCaptureFixture
) -> None:
    clients = {fail_open: app.test_client() for fail_open, app in apps.items()}
    for client in clients.values():
        assert timed_get(client, "/tight", "192.0.2.20").status == 200
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"), Traffic(apps) as traffic:
        for _ in range(10):
            admin.script_flush()
            time.sleep(0.03)
    for fail_open, client in clients.items():
        results = traffic.results[fail_open]
        assert max(r.elapsed for r in results) < BOUND
        # NOSCRIPT is answered by EVAL with the script's source, which no
        # flush can undo, so every request is decided.
        assert all(r.decided and r.status == 200 for r in results)
        assert storage_warnings(caplog, fail_open) == []
        # The flushes took the script, never the counts.
        assert [timed_get(client, "/tight", "192.0.2.20").status for _ in range(3)] == [200, 200, 429]


@pytest.mark.parametrize(
    "stall",
    [
        pytest.param(("DEBUG", "SLEEP", 3), id="debug-sleep"),
        pytest.param(("CLIENT", "PAUSE", 3000, "ALL"), id="client-pause"),
    ],
)
def test_stalled_redis(
    stall: tuple[Any, ...], admin: redis.Redis, stall_apps: dict[bool, Flask], caplog: pytest.LogCaptureFixture
) -> None:
    # DEBUG SLEEP blocks the server, so it is sent from a thread; CLIENT
    # PAUSE answers at once and holds every other client's commands.
    stalled = threading.Thread(target=admin.execute_command, args=stall)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"), Traffic(stall_apps) as traffic:
        start = time.monotonic()
        stalled.start()
        time.sleep(3.2)
    join_all([stalled], deadline=10, what=f"the admin thread sending {stall[0]}")
    assert time.monotonic() - start >= 3.0
    for fail_open, app in stall_apps.items():
        check_results(traffic.results[fail_open], fail_open)
        messages = storage_warnings(caplog, fail_open)
        assert len(messages) == 1, messages
        assert "Timeout" in messages[0], messages[0]
        # Requests that timed out may still be counted when Redis wakes up,
        # so the check uses a client that sent none of them.
        assert_limiting(app, "192.0.2.30")


def test_connection_refused_until_redis_first_starts(caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer()  # its port is free: nothing listens on it yet
    try:
        apps = {fail_open: make_app(server.url, fail_open) for fail_open in (True, False)}
        with caplog.at_level(logging.WARNING, "flask_redis_throttle"), Traffic(apps) as traffic:
            time.sleep(0.3)
        for fail_open in apps:
            check_results(traffic.results[fail_open], fail_open)
            assert not any(r.decided for r in traffic.results[fail_open])
            messages = storage_warnings(caplog, fail_open)
            assert len(messages) == 1, messages
            assert "Connection refused" in messages[0], messages[0]
        # The apps started without Redis; they limit as soon as it is there.
        server.start()
        for app in apps.values():
            assert_limiting(app, "192.0.2.40")
    finally:
        server.close()


@pytest.mark.parametrize("credentials", [pytest.param("", id="no-password"), pytest.param(":wrong@", id="wrong")])
def test_wrong_password(server: RedisServer, admin: redis.Redis, credentials: str, caplog) -> None:
    # Set after start-up: RedisServer waits for a PONG, which a server that
    # wants a password does not give.
    admin.config_set("requirepass", "secret")
    url = f"redis://{credentials}127.0.0.1:{server.port}/0"
    apps = {fail_open: make_app(url, fail_open) for fail_open in (True, False)}
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"), Traffic(apps) as traffic:
        time.sleep(0.3)
    for fail_open in apps:
        check_results(traffic.results[fail_open], fail_open)
        assert not any(r.decided for r in traffic.results[fail_open])
        messages = storage_warnings(caplog, fail_open)
        assert len(messages) == 1, messages
        # Redis's own words: "HELLO must be called with the client already
        # authenticated ..." or "invalid username-password pair ...".
        assert re.search(r"authenticat|password", messages[0], re.IGNORECASE), messages[0]
    # The right password, and limiting works.
    right = f"redis://:secret@127.0.0.1:{server.port}/0"
    for fail_open in (True, False):
        assert_limiting(make_app(right, fail_open), f"192.0.2.{50 + fail_open}")


def test_full_redis(server: RedisServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    # Without the block cache, so that a refusal below is the script's.
    apps = {fail_open: make_app(server.url, fail_open, RATELIMIT_BLOCK_CACHE_SIZE=0) for fail_open in (True, False)}
    clients = {fail_open: app.test_client() for fail_open, app in apps.items()}
    for client in clients.values():
        assert [timed_get(client, "/tight", "192.0.2.60").status for _ in range(4)] == [200, 200, 200, 429]
    # Cap Redis at 1 MB above what it uses now, then put 2 MB in it. (A
    # fixed "--maxmemory 1mb" is about what an empty server takes. SETRANGE
    # makes the 2 MB value in Redis, leaving no 2 MB query buffer behind,
    # which Redis would shrink a moment later.)
    admin.config_set("maxmemory", admin.info("memory")["used_memory"] + 1_000_000)
    admin.setrange("ballast", 2_000_000, "x")
    assert admin.info("memory")["used_memory"] > int(admin.config_get("maxmemory")["maxmemory"])
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        for client in clients.values():
            # A client over its limit is still refused: refusing writes
            # nothing, and reads are allowed. Only its log entry is lost.
            assert [timed_get(client, "/tight", "192.0.2.60").status for _ in range(2)] == [429, 429]
        with Traffic(apps) as traffic:
            time.sleep(0.3)
    for fail_open in apps:
        check_results(traffic.results[fail_open], fail_open)
        assert not any(r.decided for r in traffic.results[fail_open])
    # Each app warned, naming the fault. The refusal log's warning and the
    # storage's share one interval, so today each app logs only the first,
    # "refusal log unavailable (command not allowed when used memory >
    # 'maxmemory'.)", and counts the storage failures in its next warning.
    messages = [r.getMessage() for r in extension_records(caplog)]
    assert 2 <= len(messages) <= 4, messages
    assert all("maxmemory" in m for m in messages), messages
    admin.delete("ballast")
    for app in apps.values():
        assert_limiting(app, "192.0.2.61")


def test_script_flush_storm_every_request_is_decided(
    server: RedisServer, apps: dict[bool, Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """``SCRIPT FLUSH`` sent back to back from another thread while six
    threads send requests: a flush may land between loading the script and
    calling it again, any number of times. Every request is still decided,
    each counted once, and nothing is logged."""
    stop = threading.Event()
    flushes = [0]

    def storm() -> None:
        with redis.Redis.from_url(server.url, socket_timeout=10) as admin:
            while not stop.is_set():
                admin.script_flush()
                flushes[0] += 1

    sent: dict[tuple[bool, str], list[Result]] = {}
    errors: list[BaseException] = []

    def send(fail_open: bool, ip: str) -> None:
        client = apps[fail_open].test_client()
        results = sent[fail_open, ip] = []
        try:
            for _ in range(60):
                results.append(timed_get(client, "/", ip))
        except BaseException as error:  # surfaced below
            errors.append(error)

    senders = [
        threading.Thread(target=send, args=(fail_open, f"198.51.100.{20 + n}"))
        for fail_open in (True, False)
        for n in range(3)
    ]
    flusher = threading.Thread(target=storm)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        flusher.start()
        try:
            for thread in senders:
                thread.start()
            join_all(senders, deadline=60, what="request threads (a request hung)")
        finally:
            stop.set()
            join_all([flusher], deadline=10, what="the SCRIPT FLUSH thread")
    assert errors == []
    assert flushes[0] > 10
    for (fail_open, ip), results in sent.items():
        assert max(r.elapsed for r in results) < BOUND
        assert [(r.status, r.decided) for r in results] == [(200, True)] * 60, (fail_open, ip)
        # Each request was counted exactly once: the next one sees 60 used.
        response = get(apps[fail_open].test_client(), "/", ip=ip)
        assert response.headers["RateLimit"].startswith(f'"1m";r={100000 - 61};')
    assert caplog.records == []


def counted(owner: Any, method: str) -> list[int]:
    """Record each call of ``owner.method`` (still made), from any thread."""
    calls: list[int] = []
    original = getattr(owner, method)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    setattr(owner, method, counting)
    return calls


def test_stalled_redis_with_fallback_refusals_do_not_wait(server: RedisServer, caplog) -> None:
    """With the fallback on and Redis stalled (``SIGSTOP``), clients over
    their limit are refused by the fallback. Logging those refusals is a
    Redis write too: it goes through the breaker like the script, so once
    the breaker is open no request waits for the stalled server, and a
    request never waits for more than one call to it."""
    app = make_app(server.url, True, stall=True, RATELIMIT_FALLBACK=True, RATELIMIT_BLOCK_CACHE_SIZE=0)
    state = app.extensions["ratelimit"]
    script_calls = counted(state.throttle.sender, "evaluate")
    log_writes = counted(state.refusals, "record")
    results: list[Result] = []
    errors: list[BaseException] = []

    def over_limit(ip: str) -> None:
        client = app.test_client()
        try:
            for _ in range(25):
                results.append(timed_get(client, "/tight", ip))
        except BaseException as error:  # surfaced below
            errors.append(error)

    ips = [f"198.51.100.{40 + n}" for n in range(4)]
    client = app.test_client()
    for ip in ips:  # each client uses up its 3 a minute in Redis
        assert [timed_get(client, "/tight", ip).status for _ in range(4)] == [200, 200, 200, 429]
    threads = [threading.Thread(target=over_limit, args=(ip,)) for ip in ips]
    del script_calls[:], log_writes[:]
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        os.kill(server.pid, signal.SIGSTOP)
        try:
            for thread in threads:
                thread.start()
            join_all(threads, deadline=90, what="request threads (a request hung)")
        finally:
            os.kill(server.pid, signal.SIGCONT)
    assert errors == []
    assert len(results) == 100
    # The fallback starts empty: each client gets its 3 again, per process.
    assert sorted(r.status for r in results) == [200] * 12 + [429] * 88
    assert max(r.elapsed for r in results) < BOUND
    # No refusal was written to the stalled Redis: each was the fallback's.
    assert log_writes == []
    # Only a request that called Redis (before the breaker opened, or as a
    # probe) paid the 0.5 s socket timeout, once; every other request was
    # decided at once, without calling Redis.
    assert len(script_calls) < len(results) / 2
    slow = [r for r in results if r.elapsed >= 0.4]
    assert len(slow) <= len(script_calls), [round(r.elapsed, 2) for r in results]
    messages = [r.getMessage() for r in extension_records(caplog)]
    assert "limiting per process in memory" in messages[0]
    # No refusal was written: each was the fallback's, decided while Redis failed.
    assert not any("refusal log" in m for m in messages), messages
