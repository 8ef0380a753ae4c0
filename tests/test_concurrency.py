"""Concurrency limits: ``@limit(..., concurrent=N)`` caps how many of an
identity's requests run at once, decided in the same script call as the
layers, and each slot is given back when its request ends (its response
closed, an exception, ``abort()``, a streamed response the client left),
or by its lease when the request never ends (its worker killed).

The caps are held on real servers: a threaded Werkzeug server with
requests held inside the view by the test, and gunicorn, whose worker is
killed mid-request. Requests are held and let go with events, and leases
end on the pinned clock; a slot whose giving back failed is given back in
the background once the storage answers, which the tests wait for
(``Releases.idle``), and Redis stalled with ``SIGSTOP`` (the only tests
that pace their requests, as a client polling after the stall). The two
calls an admission cut off by a stall leaves, itself and its release, are
also run in both orders by calling the script.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import servers
from flask import Blueprint, Flask, Response, abort
from helpers import T0, Clock, extension_records, failing_hits, get, install, join_all, wait_for_gunicorn
from werkzeug.serving import make_server

from flask_redis_throttle import ConfigurationError, InvalidLimit, check, limit
from flask_redis_throttle._request import releases as releases_module
from flask_redis_throttle._request.releases import Releases
from flask_redis_throttle._request.state import RateLimitState
from flask_redis_throttle.core.engine.breaker import CircuitBreaker
from flask_redis_throttle.core.engine.codec import Layout, hash_tag
from flask_redis_throttle.core.engine.keys import Identity, identity_tag
from flask_redis_throttle.core.engine.rates import parse_limits
from flask_redis_throttle.core.engine.throttle import Hold, Policy, StorageUnavailable, Throttle
from flask_redis_throttle.core.storages import local
from flask_redis_throttle.core.storages.local import LocalFolder
from flask_redis_throttle.core.storages.storage import NodeFailure, NotSent, Storage
from flask_redis_throttle.testing import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent

#: What a 429 over a cap of 3 says of it in ``RateLimit-Policy``.
CONC_3 = '"conc";q=3;qu="concurrent-requests"'

#: How long a test waits for a thread or a server, at most: never reached when it passes.
PATIENCE = 20.0


@pytest.fixture(params=["memory", "local", pytest.param("redis", marks=pytest.mark.redis), "cluster"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each storage: memory://, local:// (a server of the test's own),
    a real server and a real cluster."""
    if request.param == "memory":
        yield "memory://"
    elif request.param == "local":
        place = LocalFolder(os.path.join(tempfile.mkdtemp(prefix="frt-conc-"), "instance"))
        yield f"local://{place.path}"
        local.stop_server(place)
    elif request.param == "cluster":
        cluster: servers.RedisCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        yield cluster.url
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        request.getfixturevalue("redis_client")  # emptied
        yield server.url


@contextmanager
def serving(app: Flask) -> Iterator[int]:
    """``app`` on a real threaded WSGI server on a free port, for the block."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="server", daemon=True)
    thread.start()
    try:
        yield server.port
    finally:
        server.shutdown()
        thread.join(PATIENCE)


@contextmanager
def closing(app: Flask) -> Iterator[None]:
    """Close the storage of ``app`` after the block: a cluster client's
    sockets are not closed when it is collected."""
    try:
        yield
    finally:
        app.extensions["ratelimit"].throttle.storage.close()


def fetch(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET ``path`` on a connection of its own: status, headers and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def closings(app: Flask) -> threading.Semaphore:
    """A semaphore released each time a response of ``app`` is closed,
    once everything its closing calls has run, the extension giving its
    slots back included: ``app``'s responses are of a class whose
    ``close()`` releases it last."""
    closed = threading.Semaphore(0)

    class Closing(app.response_class):  # type: ignore[name-defined,misc]
        def close(self) -> None:
            try:
                super().close()
            finally:
                closed.release()

    app.response_class = Closing
    return closed


def acquire(semaphore: threading.Semaphore, times: int, what: str) -> None:
    for _ in range(times):
        assert semaphore.acquire(timeout=PATIENCE), what


def streamed(text: str = "ok") -> Response:
    """A streamed response: a view that answers it holds its slot until the
    response is closed, where one with its body in hand gives it back
    before it is sent. (The test client's responses stay open until the
    test closes them.)"""
    return Response(iter([text.encode()]))


def test_no_more_than_the_cap_run_at_once_and_each_slot_comes_back(url: str) -> None:
    """Twelve requests at once from one address on a view capped at 3:
    exactly 3 run, the other 9 get 429 with ``Retry-After: 1`` and the cap
    in ``RateLimit-Policy``, without waiting for the three; once those
    three are answered and closed, their slots are back, and three more
    run. The rate layer counted only the admitted requests."""
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=url)
    closed = closings(app)
    inside, most, lock = [0], [0], threading.Lock()
    entered = threading.Semaphore(0)
    go = threading.Event()

    @app.get("/work")
    @limit("1000/h", concurrent=3)
    def work() -> str:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        entered.release()
        go.wait(PATIENCE)
        with lock:
            inside[0] -= 1
        return "done"

    install(app)
    results: list[tuple[int, dict[str, str], bytes]] = []
    start = threading.Barrier(12)
    answered = threading.Semaphore(0)

    def client() -> None:
        start.wait(PATIENCE)
        got = fetch(port, "/work")
        with lock:
            results.append(got)
        answered.release()

    with serving(app) as port, closing(app):
        threads = [threading.Thread(target=client, name=f"client-{n}") for n in range(12)]
        for thread in threads:
            thread.start()
        acquire(entered, 3, "three requests run")
        # The nine others are answered while the three still run.
        acquire(answered, 9, "nine refusals")
        with lock:
            assert sorted(status for status, _, _ in results) == [429] * 9
            for _, headers, _ in results:
                assert headers["Retry-After"] == "1"
                assert CONC_3 in headers["RateLimit-Policy"]
                assert headers["RateLimit"].startswith('"conc";r=0;')
        go.set()
        join_all(threads, PATIENCE, "the clients")
        acquire(closed, 12, "the twelve responses closed")
        assert sorted(status for status, _, _ in results) == [200] * 3 + [429] * 9
        assert most[0] == 3
        # The slots are back: three more run at once.
        go.clear()
        again = [threading.Thread(target=lambda: results.append(fetch(port, "/work"))) for _ in range(3)]
        for thread in again:
            thread.start()
        acquire(entered, 3, "three more run")
        go.set()
        join_all(again, PATIENCE, "the second clients")
        acquire(closed, 3, "their responses closed")  # their slots given back before the storage closes
    assert [status for status, _, _ in results[12:]] == [200] * 3
    assert results[-1][1]["RateLimit-Policy"] == f'"1h";q=1000;w=3600, {CONC_3}'


def cap_app(app: Flask, **options: Any) -> tuple[Flask, dict[str, Any]]:
    """``app`` with views that each allow one request at a time: ``/view``
    answers, ``/boom`` raises, ``/abort`` aborts with 404, ``/stream``
    streams without end."""
    app.config.update(**options)
    seen: dict[str, Any] = {"streamed": threading.Event()}

    @app.get("/view")
    @limit("1000/h", concurrent=1)
    def view() -> str:
        return "ok"

    @app.get("/boom")
    @limit("1000/h", concurrent=1)
    def boom() -> str:
        raise ValueError("the view failed")

    @app.get("/abort")
    @limit("1000/h", concurrent=1)
    def aborted() -> str:
        abort(404)

    @app.get("/stream")
    @limit("1000/h", concurrent=1)
    def stream() -> Response:
        def lines() -> Iterator[bytes]:
            seen["streamed"].set()
            while True:
                yield b"x" * 65536

        return Response(lines())

    return app, seen


def test_a_complete_response_gives_its_slot_back_before_it_is_sent_a_streamed_one_when_closed(app: Flask) -> None:
    """A response whose body is in hand when the view returns gives its
    slot back before the server sends it: the test client's responses stay
    open until closed, and the slot is free all the same. A streamed
    response still runs while it is sent: its slot is held until the server
    closes it, and free the moment it does."""
    cap_app(app)
    install(app)
    client = app.test_client()
    first = get(client, "/view")
    assert first.status_code == 200
    with get(client, "/view") as second:  # the first is still open
        assert second.status_code == 200
    first.close()
    stream = get(client, "/stream")
    assert stream.status_code == 200
    with get(client, "/stream") as held:
        assert held.status_code == 429
        assert held.headers["Retry-After"] == "1"
    stream.close()
    with get(client, "/stream") as again:
        assert again.status_code == 200
        # Another address has slots of its own.
        with get(client, "/stream", ip="192.0.2.2") as other:
            assert other.status_code == 200


def test_a_client_that_waits_for_each_response_is_never_refused(url: str) -> None:
    """200 requests on a cap of 1, each sent on a connection of its own
    once the previous response is read: the client never has two in
    flight, so none is refused. The server here is slow to close each
    response: it closes it only once the next request has been decided, so
    a slot given back when the response is closed (as it was) would still
    be held by then, and every request but the first would get 429."""
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=url)

    @app.get("/view")
    @limit("1000/h", concurrent=1)
    def view() -> str:
        return "ok"

    install(app)
    decided = [threading.Event() for _ in range(201)]
    made = iter(range(200))

    @app.after_request  # added after the extension's: runs before it, so its close does too
    def close_late(response: Response) -> Response:
        number = next(made)  # the requests come one after another
        decided[number].set()
        response.call_on_close(lambda: decided[number + 1].wait(PATIENCE))
        return response

    with serving(app) as port, closing(app):
        statuses = [fetch(port, "/view")[0] for _ in range(200)]
        decided[200].set()
    assert statuses == [200] * 200


@pytest.mark.parametrize("propagate", [True, False], ids=["propagated", "answered-500"])
def test_an_exception_gives_the_slot_back(app: Flask, propagate: bool) -> None:
    """A view that raises gives its slot back, whether the exception
    reaches the server (``PROPAGATE_EXCEPTIONS``, as in testing: there is
    no response to close) or Flask answers 500; its responses are never
    closed here, so nothing else could have given it back."""
    cap_app(app, PROPAGATE_EXCEPTIONS=propagate)
    install(app)
    client = app.test_client()
    for _ in range(3):
        if propagate:
            with pytest.raises(ValueError, match="the view failed"):
                get(client, "/boom")
        else:
            assert get(client, "/boom").status_code == 500


@pytest.mark.parametrize("replacement", ["streamed", "complete"])
def test_a_response_an_after_request_hook_replaces_gives_the_slot_back(app: Flask, replacement: str) -> None:
    """An ``after_request`` hook that runs after the extension's replaces
    the view's streamed response: the server closes the response the hook
    made, never the view's, and the slot goes with it (it was left on the
    view's, and held until its lease ended): when the server closes a
    streamed one, before it is sent a complete one."""
    app.after_request(  # added before the extension's: runs after it
        lambda response: (
            response
            if response.status_code != 200
            else streamed("replaced")
            if replacement == "streamed"
            else Response("replaced")
        )
    )

    @app.get("/stream")
    @limit("1000/h", concurrent=1)
    def stream() -> Response:
        return streamed()

    install(app)
    client = app.test_client()
    first = get(client, "/stream")
    assert first.get_data() == b"replaced"
    with get(client, "/stream") as second:
        assert second.status_code == (429 if replacement == "streamed" else 200)
    first.close()
    with get(client, "/stream") as again:
        assert again.status_code == 200


def test_a_request_context_that_ends_without_a_response_gives_its_slots_back(app: Flask) -> None:
    """A request decided by hand, in a request context that ends with no
    response made (as a test or a script may do): its slot comes back when
    the context ends, not when its lease does."""
    cap_app(app)
    install(app)
    for _ in range(3):
        with app.test_request_context("/view", environ_base={"REMOTE_ADDR": "192.0.2.1"}):
            assert app.preprocess_request() is None  # admitted: it holds the slot


def test_abort_gives_the_slot_back_when_its_response_is_closed(app: Flask) -> None:
    """Flask turns an ``abort()`` into a body it replays from the
    exception, one it cannot tell from a stream: its slot comes back when
    the response is closed."""
    cap_app(app)
    install(app)
    client = app.test_client()
    first = get(client, "/abort")
    assert first.status_code == 404
    assert get(client, "/abort").status_code == 429
    first.close()
    with get(client, "/abort") as again:
        assert again.status_code == 404


def test_a_streamed_response_the_client_leaves_gives_its_slot_back(app: Flask) -> None:
    """A client reads the start of an endless stream, then goes: the server
    closes the response when writing to it fails, and the slot is back.
    Until then, the stream holds it."""
    _, seen = cap_app(app)
    closed = closings(app)
    install(app)
    with serving(app) as port:
        connection = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
        connection.sendall(b"GET /stream HTTP/1.1\r\nHost: test\r\n\r\n")
        assert connection.recv(16).startswith(b"HTTP/1.1 200")
        assert seen["streamed"].wait(PATIENCE)
        assert fetch(port, "/stream")[0] == 429
        acquire(closed, 1, "the refusal closed")
        connection.close()
        acquire(closed, 1, "the stream closed")
        seen["streamed"].clear()
        again = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
        again.sendall(b"GET /stream HTTP/1.1\r\nHost: test\r\n\r\n")
        assert again.recv(16).startswith(b"HTTP/1.1 200")
        again.close()
        acquire(closed, 1, "the second stream closed")


def failing_storage(app: Flask, error: Exception) -> threading.Event:
    """Make every call of ``app``'s storage raise ``error`` while the event
    returned is set (it is, at first); clear it, and the storage answers
    again."""
    sender = app.extensions["ratelimit"].throttle.sender
    evaluate = sender.evaluate
    away = threading.Event()
    away.set()

    def failing(*args: Any, **kwargs: Any) -> Any:
        if away.is_set():
            raise error
        return evaluate(*args, **kwargs)

    sender.evaluate = failing
    return away


def test_a_slot_the_storage_cannot_take_back_is_given_back_once_it_answers(app: Flask, caplog: Any) -> None:
    """The call that gives a slot back fails (the storage is away): closing
    the response raises nothing into the server, the failure is warned of
    as an outage, and the slot is given back in the background as soon as
    the storage answers again, not when its lease ends (the pinned clock
    never moves here, so the lease never does)."""
    cap_app(app)
    state = install(app)
    client = app.test_client()
    response = get(client, "/stream")
    assert response.status_code == 200
    away = failing_storage(app, redis.ConnectionError("the storage is away"))
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        response.close()
    warnings = [record.getMessage() for record in extension_records(caplog)]
    assert any("a concurrency slot is given back once it answers" in warning for warning in warnings), warnings
    assert not state.releases.idle.is_set()  # still trying
    away.clear()
    assert state.releases.idle.wait(PATIENCE)
    assert len(state.releases) == 0
    with get(client, "/stream") as again:
        assert again.status_code == 200


@pytest.mark.internal_error
def test_a_slot_that_meets_an_internal_error_is_left_to_its_lease(
    app: Flask, clock: Clock, internal_errors: list[logging.LogRecord]
) -> None:
    """An error that is not the storage's (a bug) in the call that gives a
    slot back is logged as an internal error, and not tried again, which
    would not mend it: the slot is freed by its lease."""
    cap_app(app)
    state = install(app)
    client = app.test_client()
    response = get(client, "/stream")
    away = failing_storage(app, TypeError("a bug"))
    response.close()
    away.clear()
    assert [record.getMessage() for record in internal_errors] == [
        f"internal error in rate limiting ({state.throttle.url}: unexpected TypeError: a bug); "
        "a concurrency slot is freed by its lease."
    ]
    assert state.releases.idle.is_set()
    with get(client, "/stream") as held:
        assert held.status_code == 429
    clock.set(60)
    with get(client, "/stream") as again:
        assert again.status_code == 200


@pytest.mark.internal_error
def test_a_slot_given_back_in_the_background_that_meets_an_internal_error_is_left_to_its_lease(
    app: Flask, clock: Clock, internal_errors: list[logging.LogRecord]
) -> None:
    """The storage is away when the slot is given back, so the background
    tries again; a bug it then meets is logged once as an internal error,
    and the background stops trying: the lease frees the slot."""
    cap_app(app)
    state = install(app)
    client = app.test_client()
    response = get(client, "/stream")
    away = failing_storage(app, redis.ConnectionError("the storage is away"))
    response.close()
    bug = failing_storage(app, TypeError("a bug"))  # what the background's next try meets
    assert state.releases.idle.wait(PATIENCE)
    bug.clear()
    away.clear()
    assert [record.getMessage() for record in internal_errors] == [
        f"internal error in rate limiting ({state.throttle.url}: unexpected TypeError: a bug); "
        "a concurrency slot is freed by its lease."
    ]
    assert len(state.releases) == 0
    with get(client, "/stream") as held:
        assert held.status_code == 429
    clock.set(60)
    with get(client, "/stream") as again:
        assert again.status_code == 200


def test_a_batch_that_fails_after_one_took_a_slot_gives_the_slot_back(app: Flask, caplog: Any) -> None:
    """The request goes on undecided, as if it held no slot: the slot the
    earlier batch took is given back at once, not left to its lease (the
    pinned clock never ends it here)."""

    @app.get("/")
    @limit("1000/h", concurrent=1)
    @limit("1000/h", shadow=True, scope="watched")  # a batch of its own, decided after the cap's
    def index() -> Response:
        return Response(itertools.repeat(b"x" * 65536))  # streamed without end: a slot is held until it is closed

    state = install(app)
    away = threading.Event()
    away.set()
    failing_hits(
        state,
        StorageUnavailable("gone"),
        lambda checks, cost: away.is_set() and checks[0][0].scope == "watched",
    )
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        undecided = get(client)
    assert undecided.status_code == 200
    assert "RateLimit" not in undecided.headers
    assert any("rate limit storage unavailable (gone)" in r.getMessage() for r in extension_records(caplog))
    away.clear()
    with get(client) as first, get(client) as second:  # undecided's stream is open: the cap is free all the same
        assert (first.status_code, second.status_code) == (200, 429)
    undecided.close()


@pytest.mark.redis
def test_a_slot_redis_refuses_to_take_back_is_given_back_once_it_does(caplog: Any) -> None:
    """Redis refuses the call that gives a slot back (here its ACL forbids
    scripts for a moment): the failure is warned of as an outage, and the
    slot is given back once Redis takes the call again."""
    server = RedisServer()
    server.start()
    admin = redis.Redis.from_url(server.url)
    try:
        app = Flask("tests")
        app.config.update(RATELIMIT_STORAGE_URL=server.url, RATELIMIT_BREAKER_THRESHOLD=0)
        cap_app(app)
        state = install(app)
        client = app.test_client()
        with closing(app):
            response = get(client, "/stream")  # a stream gives its slot back when closed
            assert response.status_code == 200
            admin.execute_command("ACL", "SETUSER", "default", "-eval", "-evalsha")
            with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
                response.close()
            warnings = [record.getMessage() for record in extension_records(caplog)]
            assert any("no permissions" in warning and "given back once it answers" in warning for warning in warnings)
            admin.execute_command("ACL", "SETUSER", "default", "+@all")
            assert state.releases.idle.wait(PATIENCE)
            with get(client, "/stream") as again:
                assert again.status_code == 200
    finally:
        admin.close()
        server.close()


class FakeHold:
    """A hold that counts its calls, failing while ``away`` is set; its
    first call waits for ``gate``, when it has one."""

    def __init__(self, lease: int, away: threading.Event, gate: threading.Event | None = None) -> None:
        self.lease, self.away, self.gate, self.calls, self.given_back = lease, away, gate, 0, False
        self.called = threading.Event()
        self.throttle = type("FakeThrottle", (), {"url": "redis://away"})()

    def release(self, guarded: bool = True) -> None:
        assert not guarded  # the background passes the breakers by
        self.calls += 1
        self.called.set()
        if self.gate is not None:
            assert self.gate.wait(PATIENCE)
        if self.away.is_set():
            raise StorageUnavailable("redis://away: timed out")
        self.given_back = True


def test_the_slots_waiting_to_be_given_back_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MOST_PENDING holds wait (besides the one being tried): past
    it the oldest is left to its lease, and said so; a hold whose lease
    has ended is dropped without a call; the others are given back once
    the storage answers, and the thread ends."""
    monkeypatch.setattr(releases_module, "MOST_PENDING", 2)
    monkeypatch.setattr(releases_module, "LONGEST_PAUSE", 0.01)
    told: list[str] = []
    releases = Releases(lambda failure, consequence: told.append(f"{failure}; {consequence}"), lambda: 100.0)
    away, gate = threading.Event(), threading.Event()
    away.set()
    trying = FakeHold(60, away, gate)
    releases.add(trying)
    assert trying.called.wait(PATIENCE)  # the thread tries it, and waits
    holds = [trying, FakeHold(60, away), FakeHold(0, away), FakeHold(60, away)]  # the third's lease is over at once
    for hold in holds[1:]:
        releases.add(hold)
    assert told == ["redis://away: 2 concurrency slots wait already; the oldest is freed by its lease"]
    gate.set()  # its call fails: it waits again
    away.clear()
    assert releases.idle.wait(PATIENCE)
    assert len(releases) == 0
    assert [hold.given_back for hold in holds] == [True, False, False, True]
    assert holds[1].calls == holds[2].calls == 0
    assert releases._thread is None


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "cluster"])
def stallable(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """A storage of the test's own, which it may stop: its URL, and the
    process id of the server that holds the keys of 127.0.0.1 (the address
    of a test's clients). The cluster waits 5 s before failing a silent
    node, so that a stall of a few seconds is only a stall."""
    if request.param == "redis":
        server = RedisServer()
        server.start()
        try:
            yield server.url, server.pid
        finally:
            server.close()
        return
    with servers.redis_cluster(masters=3, node_timeout=5000, full_coverage=False) as cluster:
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in cluster.startup_nodes]
        with redis.cluster.RedisCluster(startup_nodes=nodes) as client:
            port = client.get_node_from_key(identity_tag("ip", "127.0.0.1")).port
        yield cluster.url, next(node.pid for node in cluster.masters() if node.port == port)


def test_a_stall_costs_capped_clients_the_stall_not_the_lease(stallable: tuple[str, int]) -> None:
    """Redis stops (``SIGSTOP``) while a request holds its client's one
    slot, of the default 60 s lease. The requests that come meanwhile wait
    out the socket timeout (503: failing closed) and open the circuit
    breaker, so that when the request ends, the call that gives its slot
    back is not even sent. Redis resumes. The slot is given back in the
    background once Redis answers: the client, idle until then, is
    admitted within seconds of the resume, as the breaker lets its requests
    through again; left to its lease, it got 429 for most of a minute."""
    url, pid = stallable
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=url, RATELIMIT_FAIL_OPEN=False)
    entered, go = threading.Event(), threading.Event()

    @app.get("/slow")
    @limit("1000/h", concurrent=1, scope="work")
    def slow() -> str:
        entered.set()
        go.wait(PATIENCE)
        return "done"

    @app.get("/quick")
    @limit("1000/h", concurrent=1, scope="work")
    def quick() -> str:
        return "ok"

    state = install(app)
    slow_answer: list[int] = []
    with serving(app) as port, closing(app):
        holder = threading.Thread(target=lambda: slow_answer.append(fetch(port, "/slow")[0]), name="holder")
        holder.start()
        assert entered.wait(PATIENCE)
        assert fetch(port, "/quick")[0] == 429
        os.kill(pid, signal.SIGSTOP)
        try:
            for _ in range(20):  # until the breaker answers at once
                started = time.monotonic()
                assert fetch(port, "/quick")[0] == 503
                if time.monotonic() - started < 0.1:
                    break
            else:
                pytest.fail("the circuit breaker never opened")
            go.set()
            join_all([holder], PATIENCE, "the request that held the slot")
            assert slow_answer == [200]
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        answers: list[tuple[float, int]] = []
        while time.monotonic() < resumed + 5:
            status = fetch(port, "/quick")[0]
            answers.append((round(time.monotonic() - resumed, 2), status))
            if status == 200:
                break
            time.sleep(0.05)
        assert state.releases.idle.wait(PATIENCE)
    # Refused by the cap (429) for no longer than Redis takes the call back
    # (a pause of the background thread, at most a second, and a call's
    # timeout), and admitted as soon as the breaker lets a request through.
    assert answers[-1][1] == 200, answers
    assert all(after < 1.6 for after, status in answers if status == 429), answers
    assert answers[-1][0] < 4, answers


def capped_app(url: str, fail_open: bool) -> tuple[Flask, RateLimitState]:
    """An app on ``url`` whose ``/quick`` takes a client's one
    concurrency slot while it runs, and its state. No near-limit log: its
    write would keep the pooled connection busy, and the admission, on a
    new one, would time out before it is sent."""
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=url, RATELIMIT_FAIL_OPEN=fail_open, RATELIMIT_NEAR_LIMIT=None)

    @app.get("/quick")
    @limit("1000/h", concurrent=1, scope="work")
    def quick() -> str:
        return "ok"

    return app, install(app)


@pytest.mark.parametrize("fail_open", [False, True])
def test_an_admission_a_stall_cut_off_takes_no_slot_once_redis_runs_it(
    stallable: tuple[str, int], fail_open: bool
) -> None:
    """Redis stops (``SIGSTOP``) while a capped request's admission is in
    flight: it times out, and the request is answered 503 (failing closed)
    or let through (failing open) without its slot. Redis resumes and runs the admission all the same, for
    a request already answered: it took the client's one slot for the whole
    lease (the scripts' clock is pinned: for ever), and the client got 429.
    Now the request's slot is given back by its token in the background once
    Redis answers, whichever of the two calls Redis runs first: the client is
    refused for no longer than that takes, and admitted after."""
    url, pid = stallable
    app, state = capped_app(url, fail_open)
    with serving(app) as port, closing(app):
        assert fetch(port, "/quick")[0] == 200  # connected, the script loaded
        os.kill(pid, signal.SIGSTOP)
        try:
            assert fetch(port, "/quick")[0] == (200 if fail_open else 503)  # its admission timed out, sent
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        answers: list[tuple[float, int]] = []
        while time.monotonic() < resumed + 5:
            status = fetch(port, "/quick")[0]
            answers.append((round(time.monotonic() - resumed, 2), status))
            if status == 200:
                break
            time.sleep(0.05)
        assert state.releases.idle.wait(PATIENCE)
        # Both calls have run by now: the slot stays free.
        assert [fetch(port, "/quick")[0] for _ in range(3)] == [200, 200, 200]
    assert answers[-1][1] == 200, answers
    assert all(after < 1.6 for after, status in answers if status == 429), answers


@pytest.mark.redis
@pytest.mark.parametrize("gone", [False, True])
@pytest.mark.parametrize("fail_open", [False, True])
def test_an_admission_never_sent_to_a_redis_that_is_down_leaves_nothing_to_give_back(
    gone: bool, fail_open: bool
) -> None:
    """Nothing listens on Redis's port (never did, or the server is ``gone``
    after a request, its kept connection closed): a capped request's
    admission fails to connect, before anything was sent, so it cannot have
    run, and no release of its slot is queued (a stall's is: see above). The
    failure policy answers as ever."""
    server = RedisServer() if gone else None
    url = server.url if server is not None else f"redis://127.0.0.1:{free_port()}/0"
    app, state = capped_app(url, fail_open)
    client = app.test_client()
    with closing(app):
        if server is not None:
            server.start()
            try:
                assert client.get("/quick").status_code == 200  # a connection kept
            finally:
                server.close()
        for _ in range(3):
            assert client.get("/quick").status_code == (200 if fail_open else 503)
        assert len(state.releases) == 0
        assert state.releases.idle.is_set()


def slots_call(storage: Storage, cost: int, token: str) -> list[int]:
    """One script call on the slots of 192.0.2.1 under a cap of 1 with a
    lease of 60 s, at :data:`T0`: an admission (cost 1), or the release of
    one (cost -1), with ``token``."""
    throttle = Throttle(storage)
    slots = Policy.concurrency(1, 60, "api")
    key = throttle.key(slots, Identity("ip", "192.0.2.1"))
    plan = Layout.of([(slots.entry, 1, slots.layers)]).plan
    reply: list[int] = throttle.sender.evaluate(slots.strategies, [key], [T0, cost, plan, 0, token])
    return reply


@pytest.mark.parametrize("repeated", [False, True])
def test_a_release_that_runs_before_its_admission_leaves_the_slot_free(storage: Storage, repeated: bool) -> None:
    """The release of an admission that timed out, and the admission, sent
    on two connections to a stalled Redis, run in either order once it
    resumes. Released first (twice, when the first try also timed out and
    was tried again), the slot is not taken by the admission that comes
    after: its token's tombstone makes it take none, for a lease; another
    request's admission is counted as ever."""
    for _ in range(2 if repeated else 1):
        slots_call(storage, -1, "late")
    assert slots_call(storage, 1, "late")[0] == 1  # admitted, for a request long answered
    assert slots_call(storage, 1, "other")[0] == 1  # the one slot was still free
    assert slots_call(storage, 1, "third")[0] == 0
    key = Throttle(storage).key(Policy.concurrency(1, 60, "api"), Identity("ip", "192.0.2.1"))
    # The tombstone ends with the lease, and the set with it, and a second.
    assert 60_000 < storage.client.execute_command("PTTL", key) <= 61_000


@pytest.mark.parametrize("score", ["-inf", "-1e300"])
def test_a_slots_set_with_a_score_not_ours_keeps_its_leases(storage: Storage, score: str) -> None:
    """A score below any tombstone's (written by hand, or corrupt, even
    infinite), read as the latest tombstone's end, does not delete the set
    (with a time to live Redis reads as negative): it is kept for a layer's
    longest window at most, and its leases stay."""
    key = Throttle(storage).key(Policy.concurrency(1, 60, "api"), Identity("ip", "192.0.2.1"))
    storage.client.execute_command("ZADD", key, score, "junk")
    slots_call(storage, 1, "mine")
    slots_call(storage, -1, "gone")  # a tombstone: the set is kept for it too
    assert storage.client.execute_command("ZSCORE", key, "mine") is not None
    assert 60_000 < storage.client.execute_command("PTTL", key) <= (2**32 - 1) * 1000 + 1000


def test_a_release_that_runs_after_its_admission_gives_its_slot_back(storage: Storage) -> None:
    """The other order: the admission runs first and takes the slot, then
    its release, by token, gives it back; and only that slot: another
    request's, admitted the same microsecond, stays held."""
    assert slots_call(storage, 1, "late")[0] == 1
    assert slots_call(storage, 1, "other")[0] == 0
    slots_call(storage, -1, "late")
    assert slots_call(storage, 1, "other")[0] == 1
    slots_call(storage, -1, "unknown")  # a stray release frees nobody's slot
    assert slots_call(storage, 1, "third")[0] == 0


@pytest.mark.parametrize(
    ("error", "strays"),
    [
        (redis.TimeoutError("Timeout reading from socket"), 1),
        (redis.ConnectionError("Connection reset by peer"), 1),
        (redis.ResponseError("WRONGTYPE"), 0),  # answered: it ran, and wrote nothing
        # A cluster's: one node's part ran, and may have taken its slots.
        (NodeFailure(redis.ResponseError("ERR"), frozenset(["a:1"]), frozenset(["b:2"])), 1),
        (NodeFailure(redis.TimeoutError("Timeout"), frozenset(["a:1"])), 1),
        (NodeFailure(redis.ResponseError("ERR"), frozenset(["a:1"])), 0),
        (None, 0),  # held back by the open breaker: never sent
        (NotSent.of(redis.ConnectionError("Connection refused")), 0),  # nor when connecting failed
    ],
)
@pytest.mark.parametrize("fallback", [False, True])
def test_only_an_admission_that_may_still_run_leaves_its_slots_to_give_back(
    error: Exception | None, strays: int, fallback: bool
) -> None:
    """The slots of an admission that failed are handed to be given back
    (:attr:`Throttle.strays`) when the call may have run: sent, with no
    reply. The fallback deciding the request in its place changes nothing."""
    breaker = CircuitBreaker(threshold=1, backoff=60.0, max_backoff=60.0)
    spare = Throttle(Storage.from_url("memory://")) if fallback else None
    throttle = Throttle(Storage.from_url("memory://"), breaker=breaker, fallback=spare)
    handed: list[Hold] = []
    throttle.strays = handed.append
    if error is None:
        breaker.failure()
    else:
        failure = error

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise failure

        throttle.sender.evaluate = failing  # type: ignore[method-assign]
    slots, rate, who = Policy.concurrency(1, 60, "api"), Policy(parse_limits("5/s"), "api"), Identity("ip", "192.0.2.1")
    if fallback:
        assert throttle.hit([(slots, [who])]).fallback
    else:
        with pytest.raises(StorageUnavailable):
            throttle.hit([(slots, [who])])
    with contextlib.suppress(StorageUnavailable):
        throttle.hit([(rate, [who])])  # holds no slot
    assert len(handed) == strays
    for hold in handed:
        assert hold.keys == (throttle.key(slots, who),)
        assert hold.lease == 60
        assert len(hold.token) == 16


def test_a_slot_s_token_is_not_part_of_a_cluster_request_s_kept_fan_out(redis_cluster: servers.RedisCluster) -> None:
    """Each capped request sends a token of its own; the fan-out of its
    calls is still worked out once and kept, not once per request (nor does
    it push out the others' from the bounded cache)."""
    redis_cluster.flushall()
    storage = Storage.from_url(redis_cluster.url)
    try:
        throttle = Throttle(storage)
        slots = Policy.concurrency(5, 60, "api")
        ip, user = Identity("ip", "192.0.2.1"), Identity("user", "42")
        for _ in range(3):
            decision = throttle.hit([(slots, [ip, user])])
            assert decision.hold is not None
            decision.hold.release()
        assert len(throttle.sender._fanouts) == 2  # the admissions', the releases'
    finally:
        storage.close()


def test_a_slot_never_given_back_is_freed_when_its_lease_ends(app: Flask, clock: Clock) -> None:
    """Responses never closed (a worker that died) keep their slots until
    their lease ends, not a microsecond longer: ``RATELIMIT_CONCURRENCY_LEASE``
    by default, a limit's ``lease=`` when it has one."""
    app.config.update(RATELIMIT_CONCURRENCY_LEASE=45)

    @app.get("/default")
    @limit("1000/h", concurrent=1)
    def default() -> Response:
        return streamed()

    @app.get("/own")
    @limit("1000/h", concurrent=1, lease=5)
    def own() -> Response:
        return streamed()

    install(app)
    client = app.test_client()
    for path, lease in (("/default", 45), ("/own", 5)):
        clock.set(0)
        assert get(client, path).status_code == 200  # never closed
        clock.set(lease - 1e-6)
        assert get(client, path).status_code == 429
        clock.set(lease)
        assert get(client, path).status_code == 200


def test_the_lease_setting_is_checked() -> None:
    for bad in (0, -1, 1.5, "60", True, 366 * 86_400 + 1):
        app = Flask("tests")
        app.config.update(RATELIMIT_CONCURRENCY_LEASE=bad)
        with pytest.raises(ConfigurationError, match="RATELIMIT_CONCURRENCY_LEASE"):
            install(app)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrent": 0}, "concurrent 0 must be an integer from 1"),
        ({"concurrent": 2.5}, "concurrent 2.5 must be an integer"),
        ({"concurrent": True}, "concurrent True must be an integer"),
        ({"concurrent": 2, "lease": 0}, "lease 0 must be a whole number of seconds"),
        ({"concurrent": 2, "lease": "1m"}, "lease '1m' must be a whole number of seconds"),
        ({"lease": 30}, "lease 30 needs concurrent="),
        ({"concurrent": 2, "deduct_when": lambda response: True}, "concurrent= cannot go with deduct_when="),
    ],
)
def test_bad_concurrency_options_fail_when_decorating(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidLimit, match=message):
        limit("10/s", **options)


def test_a_request_takes_one_slot_whatever_its_cost(app: Flask) -> None:
    """A cost of 5 on a cap of 2: each request takes one slot, so two run
    at once and the third is refused by the cap, not as over its quota, with
    a message that says so; ``check()`` sees a free slot, taking none."""

    @app.get("/")
    @limit("100/h", concurrent=2, cost=5)
    def index() -> Response:
        return streamed()  # held until closed, and none is

    install(app)
    client = app.test_client()
    with app.test_request_context("/", environ_base={"REMOTE_ADDR": "192.0.2.1"}):
        assert not check("index").breached  # a slot is free, whatever the cost
    assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
    refused = get(client, headers={"Accept": "application/json"})
    assert refused.headers["Retry-After"] == "1"
    assert refused.headers["RateLimit"].startswith('"conc";r=0;')
    assert refused.json["detail"] == "Concurrency limit exceeded: at most 2 requests at once. Try again in 1 second."
    with app.test_request_context("/", environ_base={"REMOTE_ADDR": "192.0.2.1"}):
        assert check("index").breached


def test_dynamic_shadow_and_blueprint_limits_take_slots_too(app: Flask) -> None:
    """The cap goes with any limit: a dynamic one, a blueprint's, and one in
    shadow mode, whose refusal over the cap lets the request through and
    takes no slot."""
    reports = Blueprint("reports", __name__)

    @reports.get("/reports")
    def export() -> Response:
        return streamed()

    limit("100/h", concurrent=1)(reports)
    app.register_blueprint(reports)

    @app.get("/dynamic")
    @limit(lambda request: "100/h", concurrent=1)
    def dynamic() -> Response:
        return streamed()

    @app.get("/shadow")
    @limit("100/h", concurrent=1, shadow=True)
    def shadow() -> Response:
        return streamed()

    install(app)
    client = app.test_client()
    first = get(client, "/dynamic")
    assert [first.status_code, get(client, "/dynamic").status_code] == [200, 429]
    policy = get(client, "/dynamic").headers["RateLimit-Policy"]
    assert policy == '"1h";q=100;w=3600, "conc";q=1;qu="concurrent-requests"'
    first.close()
    assert get(client, "/dynamic").status_code == 200
    held = get(client, "/shadow")
    assert [held.status_code, get(client, "/shadow").status_code] == [200, 200]
    exporting = get(client, "/reports")
    assert [exporting.status_code, get(client, "/reports").status_code] == [200, 429]
    exporting.close()
    assert get(client, "/reports").status_code == 200


def test_views_of_one_scope_share_their_slots(app: Flask) -> None:
    @app.get("/csv")
    @limit("100/h", concurrent=1, scope="exports")
    def csv() -> Response:
        return streamed()

    @app.get("/pdf")
    @limit("100/h", concurrent=1, scope="exports")
    def pdf() -> Response:
        return streamed()

    @app.get("/preview")
    @limit("100/h", concurrent=1)
    def preview() -> Response:
        return streamed()

    install(app)
    client = app.test_client()
    exporting = get(client, "/csv")
    assert exporting.status_code == 200
    assert [get(client, "/pdf").status_code, get(client, "/preview").status_code] == [429, 200]
    exporting.close()
    assert get(client, "/pdf").status_code == 200


def test_each_slot_key_lives_with_its_identity_s_hash_tag() -> None:
    """On a cluster, an identity's slots are in the slot of its counters."""
    throttle = Throttle(Storage.from_url("memory://"))
    who = Identity("ip", "192.0.2.1")
    counters, slots = Policy(parse_limits("5/s"), "api"), Policy.concurrency(3, 60, "api")
    assert throttle.key(slots, who).endswith("}:api:cc")
    assert hash_tag(throttle.key(slots, who)) == hash_tag(throttle.key(counters, who))


def test_a_refusal_anywhere_takes_no_slot_and_a_full_cap_takes_no_quota(storage: Storage) -> None:
    """Every layer and the cap are checked before anything is written: a
    request the rate layer refuses takes no slot, and one the cap refuses
    takes no quota, for any of its identities (on a cluster, two nodes'
    calls: the other identity's are refunded)."""
    throttle = Throttle(storage)
    throttle.now = lambda: T0  # type: ignore[method-assign]
    rate, slots = Policy(parse_limits("2/h"), "api"), Policy.concurrency(1, 60, "api")
    ip, user = Identity("ip", "192.0.2.1"), Identity("user", "42")

    def hit(*identities: Identity) -> Any:
        return throttle.hit([(rate, list(identities)), (slots, list(identities))])

    first = hit(ip, user)
    assert first.admitted
    assert first.hold is not None
    # The cap refuses: the hourly layer keeps its second request.
    refused = hit(ip, user)
    assert not refused.admitted
    assert refused.policy is slots
    assert refused.retry_after == 1.0
    first.hold.release()
    second = hit(ip, user)
    assert second.admitted
    assert second.remaining == 0
    assert second.hold is not None
    second.hold.release()
    # The hourly layer refuses: no slot is taken, for either identity.
    assert not hit(ip, user).admitted
    fresh = Policy(parse_limits("2/h"), "other")
    for who in (ip, user):
        alone = throttle.hit([(fresh, [who]), (slots, [who])])
        assert alone.admitted, who
        assert alone.hold is not None
        alone.hold.release()


def test_the_slots_set_never_holds_more_leases_than_the_cap(storage: Storage) -> None:
    """Leases never given back end, and are dropped before a new one is
    added: the set holds the cap's leases at most, however many ended, and
    expires with the last."""
    throttle = Throttle(storage)
    at = [T0]
    throttle.now = lambda: at[0]  # type: ignore[method-assign]
    slots, who = Policy.concurrency(2, 10, "api"), Identity("ip", "192.0.2.1")
    key = throttle.key(slots, who)
    for round_ in range(5):
        at[0] = T0 + round_ * 10 * 1_000_000  # the last round's leases have just ended
        assert [throttle.hit([(slots, [who])]).admitted for _ in range(3)] == [True, True, False]
        assert storage.client.execute_command("ZCARD", key) == 2
        # It expires with its last lease, and a second (see records.lua).
        assert 10_000 < storage.client.execute_command("PTTL", key) <= 11_000


def test_giving_back_a_slot_whose_lease_has_ended_changes_nothing(storage: Storage) -> None:
    """A request that outlived its lease gives back nothing: the slot it
    held is already someone else's, and stays theirs."""
    throttle = Throttle(storage)
    at = [T0]
    throttle.now = lambda: at[0]  # type: ignore[method-assign]
    slots, who = Policy.concurrency(1, 10, "api"), Identity("ip", "192.0.2.1")
    late = throttle.hit([(slots, [who])]).hold
    assert late is not None
    at[0] = T0 + 10 * 1_000_000
    assert throttle.hit([(slots, [who])]).admitted  # the lease has ended: the slot is free again
    late.release()
    assert not throttle.hit([(slots, [who])]).admitted


def test_the_concurrency_file_stands_alone(storage: Storage) -> None:
    """concurrency.lua, run as a script on its own, decides from its
    parameters alone (see test_lua.py), writes nothing when checking, and
    takes one slot for a request of any cost."""
    from importlib.resources import files

    from flask_redis_throttle.core.engine import scripts

    text = (files(scripts.__package__) / "lua" / "concurrency.lua").read_text("utf-8")
    script = (
        "local strategy = (function()\n"
        + text
        + "\nend)()\n"
        + "local fit, left, _, retry, record, life = strategy.check(tonumber(ARGV[1]), 5, 3, 60, KEYS[1], '', nil)\n"
        + "return {fit and 1 or 0, left, retry, record and 1 or 0, life}"
    )
    key = "alone{conc}:cc"
    assert storage.client.eval(script, 1, key, T0) == [1, 2, 0, 1, 60_000_000]
    assert storage.client.exists(key) == 0


SERVED = """
    import os
    import time

    from flask import Flask, Response

    from flask_redis_throttle import RateLimit, limit
    from flask_redis_throttle.core.engine.throttle import Throttle

    T0 = 1_800_000_000 * 1_000_000
    CLOCK = os.environ["FRT_TEST_CLOCK"]

    # The test moves the workers' clock: seconds after T0, in a file.
    Throttle.now = lambda self: T0 + round(float(open(CLOCK).read()) * 1_000_000)

    app = Flask(__name__)
    app.config["RATELIMIT_STORAGE_URL"] = os.environ["FRT_TEST_REDIS"]

    @app.route("/slow")
    @limit("1000/h", concurrent=1, lease=30)
    def slow():
        def body():
            yield str(os.getpid()).encode() + b"\\n"
            time.sleep(120)  # killed long before
            yield b"never"

        return Response(body())

    @app.route("/ping")
    def ping():
        return "pong"

    RateLimit(app)
"""


@pytest.mark.redis
def test_a_killed_worker_s_slot_is_freed_by_its_lease(
    redis_server: RedisServer, redis_client: Any, tmp_path: Path
) -> None:
    """gunicorn, two workers. A request holds the only slot, and its worker
    is killed with SIGKILL mid-request: nothing gives the slot back, so the
    other workers refuse the address until the lease ends, then admit it."""
    (tmp_path / "served.py").write_text(textwrap.dedent(SERVED))
    clock = tmp_path / "clock"
    clock.write_text("0")
    port = free_port()
    env = {
        **os.environ,
        "FRT_TEST_CLOCK": str(clock),
        "FRT_TEST_REDIS": redis_server.url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    # A long timeout: gunicorn itself must not kill the held request; a short graceful one, to stop.
    options = ["--workers", "2", "--timeout", "300", "--graceful-timeout", "1", "--bind", f"127.0.0.1:{port}"]
    command = [sys.executable, "-m", "gunicorn", *options]
    process = subprocess.Popen(
        [*command, "served:app"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_gunicorn(port, process, "/ping")
        holder = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
        holder.request("GET", "/slow")
        response = holder.getresponse()
        assert response.status == 200
        pid = int(response.readline())
        assert fetch(port, "/slow")[0] == 429  # the other worker
        os.kill(pid, signal.SIGKILL)
        holder.close()
        # A new worker replaces it; neither gives the dead worker's slot back.
        clock.write_text(str(30 - 1e-6))
        statuses = {fetch(port, "/slow")[0] for _ in range(4)}
        assert statuses == {429}
        clock.write_text("30")
        status, _, _ = fetch_head(port, "/slow")
        assert status == 200
    finally:
        process.terminate()
        process.wait(timeout=PATIENCE)


def fetch_head(port: int, path: str) -> tuple[int, dict[str, str], None]:
    """GET ``path`` and read only the status and headers (a stream that
    never ends is left, and closed with the connection)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), None
    finally:
        connection.close()
