"""A single node's script calls, on redis-py's public API (``evalsha``,
``eval``, a plain pipeline), on real servers: they count exactly, a call
that timed out is not sent again, a broken connection is survived without
counting twice, no connection is leaked, and TLS, Unix sockets, RESP3,
forked workers and Sentinel failovers all work. Retries, reconnection and
fork safety are redis-py's; these tests check what they add up to."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from helpers import evalsha_calls, get, install, join_all, spy_sends
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import redis_command, redis_sentinel_group, tls_proxy

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.testing import RedisServer, redis_server

pytestmark = pytest.mark.redis


def limited_app(url: str = "", spec: str = "5/m", client: Any = None, **config: Any) -> Flask:
    """An app limiting ``/`` to ``spec`` per IP, on ``url`` or on ``client``."""
    app = Flask("tests")
    app.config.update(
        TESTING=True,
        RATELIMIT_STORAGE_URL=url or "memory://",
        RATELIMIT_BLOCK_CACHE_SIZE=0,
        RATELIMIT_HEADERS_LEGACY=True,
    )

    @app.get("/")
    @limit(spec)
    def index() -> str:
        return "ok"

    if client is not None:
        app.config.update(config)
        RateLimit(app, redis=client)
    else:
        install(app, **config)
    return app


def storage_of(app: Flask) -> Storage:
    storage: Storage = app.extensions["ratelimit"].throttle.storage
    return storage


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    """The commands sent on any redis-py connection: ``(port or socket, name)``
    per command each time it is sent (see :func:`helpers.spy_sends`)."""
    return spy_sends(monkeypatch)


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    """The session's server, emptied, its command stats reset."""
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushall()
    admin.config_resetstat()
    admin.script_flush()
    admin.close()
    return redis_server


def scripts(commands: list[tuple[Any, str]]) -> list[str]:
    """The script calls among ``commands`` (a 429 also logs the refusal with XADD)."""
    return [name for _, name in commands if name in ("EVAL", "EVALSHA")]


def remaining(response: Any) -> int:
    return int(response.headers.get("X-RateLimit-Remaining", -1))


def wait_for_child(pid: int, deadline: float) -> int:
    """The exit status of the child ``pid``, killed if it has not exited
    within ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not exit within {deadline} s")


def statuses(app: Flask, n: int, ip: str = "192.0.2.1") -> list[int]:
    web = app.test_client()
    return [get(web, ip=ip).status_code for _ in range(n)]


def connected(port: int) -> int:
    """How many clients the server on ``port`` has connected now, besides the asking one."""
    return int(redis_command(port, "INFO", "clients").split("connected_clients:")[1].split()[0]) - 1


def test_script_calls_go_through_redis_pys_evalsha(server: RedisServer, commands: list[tuple[Any, str]]) -> None:
    app = limited_app(server.url, "5/m")
    assert statuses(app, 7) == [200] * 5 + [429] * 2
    # The first request met NOSCRIPT and loaded the script with EVAL; every
    # call went through redis-py's own command path.
    assert scripts(commands) == ["EVALSHA", "EVAL"] + ["EVALSHA"] * 6
    admin = redis.Redis.from_url(server.url)
    assert evalsha_calls(admin) == 7
    admin.close()
    storage_of(app).close()


def test_threads_count_exactly(server: RedisServer) -> None:
    app = limited_app(server.url, "100/m")
    others = connected(server.port)
    results: list[int] = []
    lock = threading.Lock()

    def hammer() -> None:
        web = app.test_client()
        mine = [get(web).status_code for _ in range(30)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=hammer) for _ in range(6)]
    for thread in threads:
        thread.start()
    join_all(threads, deadline=60, what="the request threads")
    assert sorted(results) == [200] * 100 + [429] * 80
    # Each thread held one kept connection at a time for its script calls,
    # and gave it back; the refusals' log took connections from the pool.
    assert len(storage_of(app).connections._free) <= 6  # type: ignore[union-attr]
    assert connected(server.port) - others <= 2 * 6
    storage_of(app).close()


def kill_the_kept_connection(app: Flask, admin: redis.Redis) -> Any:
    """Close, from the server's end, the connection the storage keeps for
    its script calls (after a request made it); returns that connection."""
    [connection] = storage_of(app).connections._free  # type: ignore[union-attr]
    connection.send_command("CLIENT", "ID")
    admin.client_kill_filter(_id=int(connection.read_response()))
    return connection


def blind_the_next_check(monkeypatch: pytest.MonkeyPatch, connection: Any) -> None:
    """The next check before a send on ``connection`` does not see that the
    server closed it (as when it closes it just after the check): its
    ``can_read`` answers no reply pending, once."""
    original = connection.can_read
    calls: list[int] = []

    def can_read(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        return False if len(calls) == 1 else bool(original(*args, **kwargs))

    monkeypatch.setattr(connection, "can_read", can_read)


def test_a_kept_connection_the_server_closed_is_replaced_before_the_send_and_counted_once(
    server: RedisServer, commands: list[tuple[Any, str]]
) -> None:
    """The server closed the kept connection while it sat idle (Redis's
    ``timeout``, ``CLIENT KILL``): the check before the send finds it
    closed, and the call goes out once, on a new connection."""
    app = limited_app(server.url, "5/m")
    web = app.test_client()
    assert remaining(get(web)) == 4  # the script is loaded, a connection kept
    admin = redis.Redis.from_url(server.url)
    kill_the_kept_connection(app, admin)
    del commands[:]
    before = evalsha_calls(admin)
    assert remaining(get(web)) == 3  # decided, and counted once
    assert scripts(commands) == ["EVALSHA"]
    assert evalsha_calls(admin) - before == 1
    assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
    admin.close()
    storage_of(app).close()


def test_a_send_that_fails_is_sent_once_more_on_a_new_connection_and_counted_once(
    server: RedisServer, commands: list[tuple[Any, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection error while sending: nothing reached Redis, so the
    call is sent once more, on a new connection, and counted once. The
    server closed the kept connection, and answered a byte written on it
    with a reset, so that the next write fails (the check before the send
    is blinded to that, as when the close comes just after it)."""
    app = limited_app(server.url, "5/m")
    web = app.test_client()
    assert remaining(get(web)) == 4
    admin = redis.Redis.from_url(server.url)
    connection = kill_the_kept_connection(app, admin)
    connection.send_packed_command(connection.pack_command("PING"), check_health=False)  # answered with a reset
    time.sleep(0.05)
    blind_the_next_check(monkeypatch, connection)
    del commands[:]
    before = evalsha_calls(admin)
    assert remaining(get(web)) == 3  # decided, and counted once
    assert scripts(commands) == ["EVALSHA", "EVALSHA"]  # the failed send, and the one more
    assert evalsha_calls(admin) - before == 1
    admin.close()
    storage_of(app).close()


def test_a_connection_broken_after_the_send_is_not_sent_again(
    server: RedisServer,
    commands: list[tuple[Any, str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The call was sent, and the connection broke before its reply: the
    call may have run, so it is not sent again (redis-py's own retry
    would); the request follows the failure policy (open: let through,
    undecided). Here the server had closed the connection, so nothing ran."""
    app = limited_app(server.url, "5/m")
    web = app.test_client()
    assert remaining(get(web)) == 4
    admin = redis.Redis.from_url(server.url)
    blind_the_next_check(monkeypatch, kill_the_kept_connection(app, admin))
    del commands[:]
    before = evalsha_calls(admin)
    with caplog.at_level("WARNING", "flask_redis_throttle"):
        response = get(web)
    assert response.status_code == 200
    assert "RateLimit" not in response.headers  # undecided
    assert "Connection" in caplog.text
    assert scripts(commands) == ["EVALSHA"]  # sent once, not again
    assert evalsha_calls(admin) - before == 0
    assert remaining(get(web)) == 3  # the next request, on a new connection
    admin.close()
    storage_of(app).close()


def request_while_redis_sleeps(server: RedisServer, web: FlaskClient) -> Any:
    """A request sent while ``DEBUG SLEEP`` blocks Redis for 0.5 s, longer
    than the 0.3 s socket timeout of the tests that use it: the script is
    sent, times out on the client's side, and runs when Redis wakes up. Not
    so long that a retry could not reconnect (its handshake waits for Redis
    to wake) and send the call again. The response, once Redis is awake."""
    admin = redis.Redis.from_url(server.url)
    try:
        sleeper = threading.Thread(target=admin.execute_command, args=("DEBUG", "SLEEP", "0.5"))
        sleeper.start()
        time.sleep(0.1)
        response = get(web)
        join_all([sleeper], deadline=10, what="DEBUG SLEEP")
    finally:
        admin.close()
    return response


class Cancelled(BaseException):
    """Raised by a timer signal into a request that waits for Redis, as a
    worker's request timeout or a cancelled green thread would (gevent's
    ``Timeout`` is a :class:`BaseException` too)."""


def test_a_call_cancelled_while_it_waits_leaves_no_reply_behind(server: RedisServer) -> None:
    """A request interrupted while it waits for its reply (the exception
    goes up through the storage): the reply that comes later must not be
    read by the next request on the same kept connection, which would then
    answer with the previous call's count. The connection is closed, the
    next request connects again, and every count is right."""
    app = limited_app(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 5})
    web = app.test_client()
    assert remaining(get(web)) == 4
    admin = redis.Redis.from_url(server.url)

    def cancel(signum: int, frame: Any) -> None:
        raise Cancelled

    previous = signal.signal(signal.SIGALRM, cancel)
    sleeper = threading.Thread(target=admin.execute_command, args=("DEBUG", "SLEEP", "1"))
    try:
        sleeper.start()
        time.sleep(0.1)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Cancelled):
            get(web)
        signal.setitimer(signal.ITIMER_REAL, 0)
        # While Redis still sleeps, before the cancelled call's reply came:
        # the check before the send cannot see it yet.
        assert sleeper.is_alive()
        after = [remaining(get(web)) for _ in range(3)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        join_all([sleeper], deadline=10, what="DEBUG SLEEP")
    # The cancelled call ran when Redis woke up: counted once, and its
    # reply was not taken for the next request's.
    assert after == [2, 1, 0]
    admin.close()
    storage_of(app).close()


def test_a_timed_out_call_is_not_replayed_and_counted_once(
    server: RedisServer, commands: list[tuple[Any, str]], caplog: pytest.LogCaptureFixture
) -> None:
    app = limited_app(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 0.3})
    web = app.test_client()
    assert remaining(get(web)) == 4
    admin = redis.Redis.from_url(server.url)
    before = evalsha_calls(admin)
    del commands[:]
    with caplog.at_level("WARNING", "flask_redis_throttle"):
        response = request_while_redis_sleeps(server, web)
    assert response.status_code == 200  # failed open, after one timeout
    assert "RateLimit" not in response.headers  # undecided
    assert "Timeout" in caplog.records[-1].getMessage()
    assert scripts(commands) == ["EVALSHA"]  # sent once, not again
    # The timed-out call ran once, when Redis woke up: counted once, not twice.
    assert evalsha_calls(admin) - before == 1
    assert remaining(get(web)) == 2
    admin.close()
    storage_of(app).close()


def test_a_client_of_ones_own_that_retries_timeouts_still_counts_a_timed_out_call_once(
    server: RedisServer, commands: list[tuple[Any, str]]
) -> None:
    """A client handed over with ``redis=`` that retries timeouts (redis-py
    6 and later do by default) would send a timed-out script again, and
    Redis, waking up, would run both: the storage's script calls do not go
    through the client's retry (see :class:`~flask_redis_throttle.core.storages.storage.Connections`),
    so the call is sent once, the request follows the failure policy, and
    it is counted once."""
    client = redis.Redis.from_url(
        server.url, socket_timeout=0.3, retry=Retry(NoBackoff(), 1), retry_on_error=[redis.TimeoutError]
    )
    app = limited_app(spec="5/m", client=client)
    web = app.test_client()
    assert remaining(get(web)) == 4
    admin = redis.Redis.from_url(server.url)
    before = evalsha_calls(admin)
    del commands[:]
    response = request_while_redis_sleeps(server, web)
    assert "RateLimit" not in response.headers  # undecided, let through
    assert scripts(commands) == ["EVALSHA"]  # sent once
    assert evalsha_calls(admin) - before == 1  # and run once, when Redis woke up
    assert remaining(get(web)) == 2
    admin.close()
    client.close()


def test_connections_are_not_leaked_by_failed_calls(server: RedisServer) -> None:
    """A pool of two connections: calls that time out, meet NOSCRIPT or a
    killed connection each give their connection back (or close it), so
    every later request is still decided; a leak would exhaust the pool."""
    app = limited_app(server.url, "100/m", RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 0.2, "max_connections": 2})
    web = app.test_client()
    admin = redis.Redis.from_url(server.url)
    admin.ping()  # the admin's connection is one of the others
    others = connected(server.port)
    for _ in range(3):
        admin.script_flush()
        assert "RateLimit" in get(web).headers  # decided, after NOSCRIPT
        sleeper = threading.Thread(target=admin.execute_command, args=("DEBUG", "SLEEP", "0.4"))
        sleeper.start()
        time.sleep(0.05)
        assert "RateLimit" not in get(web).headers  # timed out
        join_all([sleeper], deadline=10, what="DEBUG SLEEP")
    admin.client_kill_filter(_type="normal", skipme=True)
    left = remaining(get(web))
    assert [remaining(get(web)) for _ in range(20)] == list(range(left - 1, left - 21, -1))
    # The kept connection and any the other commands check out: the pool's two at most.
    assert connected(server.port) <= 2 + others
    admin.close()
    storage_of(app).close()


def libc_fork() -> int:
    """fork(2) itself, as uWSGI forks its workers: Python's at-fork hooks
    (``os.register_at_fork``) do not run in the child."""
    pid: int = ctypes.CDLL(None, use_errno=True).fork()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork failed")
    return pid


@pytest.mark.parametrize("fork", [os.fork, libc_fork], ids=["os.fork", "fork(2), as uWSGI"])
def test_a_forked_child_uses_connections_of_its_own(server: RedisServer, fork: Callable[[], int]) -> None:
    app = limited_app(server.url, "5/m")
    storage = storage_of(app)
    web = app.test_client()
    assert [remaining(get(web)) for _ in range(2)] == [4, 3]
    read, write = os.pipe()
    pid = fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            response = get(app.test_client())
            report = f"{response.status_code} {remaining(response)}"
        except BaseException as error:
            report = repr(error)
        os.write(write, report.encode())
        os._exit(0)
    os.close(write)
    status = wait_for_child(pid, deadline=30)
    report = os.read(read, 1000).decode()
    os.close(read)
    assert status == 0
    # Counted once in the child, on a connection of its own (redis-py's pool
    # starts afresh in a child); the parent's connection still reads its
    # own replies, so its socket was never read by two processes.
    assert report == "200 2"
    assert [remaining(get(web)) for _ in range(2)] == [1, 0]
    storage.close()


def test_resp3_works(server: RedisServer, commands: list[tuple[Any, str]]) -> None:
    app = limited_app(server.url, "3/m", RATELIMIT_STORAGE_OPTIONS={"protocol": 3})
    assert statuses(app, 4) == [200, 200, 200, 429]
    assert scripts(commands) == ["EVALSHA", "EVAL", "EVALSHA", "EVALSHA", "EVALSHA"]
    storage_of(app).close()


def test_tls_works(server: RedisServer, commands: list[tuple[Any, str]]) -> None:
    with tls_proxy(server.port) as proxy:
        app = limited_app(proxy.url, "3/m", RATELIMIT_STORAGE_OPTIONS={"ssl_ca_certs": proxy.ca_file})
        assert statuses(app, 4) == [200, 200, 200, 429]
        assert scripts(commands) == ["EVALSHA", "EVAL", "EVALSHA", "EVALSHA", "EVALSHA"]
        storage_of(app).close()


def test_a_unix_socket_works(tmp_path: Any, commands: list[tuple[Any, str]]) -> None:
    path = tmp_path / "redis.sock"
    with redis_server(["--unixsocket", str(path), "--unixsocketperm", "700"]):
        app = limited_app(f"unix://{path}", "3/m")
        assert statuses(app, 4) == [200, 200, 200, 429]
        assert scripts(commands) == ["EVALSHA", "EVAL", "EVALSHA", "EVALSHA", "EVALSHA"]
        storage_of(app).close()


def close_sentinel_app(app: Flask) -> None:
    """Close the app's storage, which closes its connections to the
    sentinels too: left to the garbage collector, an open socket can be
    finalized before its connection closes it, a ResourceWarning."""
    storage = storage_of(app)
    sentinels = storage.client.connection_pool.sentinel_manager.sentinels
    storage.close()
    open_sockets = [c for s in sentinels for c in s.connection_pool._available_connections if c._sock is not None]
    assert open_sockets == []


def test_closing_the_storage_closes_its_connections_to_the_sentinels() -> None:
    with redis_sentinel_group() as group:
        app = limited_app(group.url, "5/m")
        assert get(app.test_client()).status_code == 200
        close_sentinel_app(app)


def fail_over(group: Any) -> tuple[int, int]:
    """Fail ``group``'s master over to its replica, once the replica holds
    every write, and wait until the sentinel names the new master and the
    old one is a replica. Returns the old and the new master's ports."""
    old, new = group.master.port, group.replica.port
    # The replica must hold the counts before it is promoted.
    written = int(redis_command(old, "INFO", "replication").split("master_repl_offset:")[1].split()[0])
    deadline = time.monotonic() + 10
    while int(redis_command(new, "INFO", "replication").split("slave_repl_offset:")[1].split()[0]) < written:
        assert time.monotonic() < deadline, "the replica did not catch up"
        time.sleep(0.02)
    redis_command(group.sentinel_port, "SENTINEL", "FAILOVER", group.service)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        master = redis_command(group.sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.service)
        try:
            demoted = redis_command(old, "ROLE")[0] == "slave"
        except OSError:
            # The old master drops its clients as it turns into a replica.
            demoted = False
        if isinstance(master, list) and master[1] == str(new) and demoted:
            return old, new
        time.sleep(0.05)
    pytest.fail("the sentinel did not fail over")


def test_a_sentinel_failover_moves_the_calls_to_the_new_master() -> None:
    with redis_sentinel_group() as group:
        app = limited_app(group.url, "5/m")
        web = app.test_client()
        assert [remaining(get(web)) for _ in range(2)] == [4, 3]
        # A graceful failover: the old master lives on as a replica, and the
        # pooled connection to it is either closed by the sentinel or
        # answered READONLY; either way redis-py decides the next request on
        # the new master, which has the replicated counts.
        fail_over(group)
        assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
        assert get(web).status_code == 429
        close_sentinel_app(app)


def test_clients_of_every_kind_are_driven_alike(server: RedisServer) -> None:
    class Traced(redis.Connection):
        """A connection class of the app's own, which may send differently."""

    single = redis.Redis.from_url(server.url, single_connection_client=True)
    custom = redis.Redis(connection_pool=redis.ConnectionPool.from_url(server.url, connection_class=Traced))
    resp3 = redis.Redis.from_url(server.url, protocol=3)
    for n, client in enumerate((single, custom, resp3)):
        app = limited_app(spec="2/m", client=client)
        assert statuses(app, 3, ip=f"192.0.2.{n + 10}") == [200, 200, 429]
        client.close()


def started(url: str, spec: str = "5/m", **config: Any) -> tuple[Flask, Any]:
    """An app on ``url`` limiting ``/`` to ``spec``, and its test client, after
    two requests: the first meets NOSCRIPT and loads the script."""
    app = limited_app(url, spec, **config)
    web = app.test_client()
    quota = int(spec.split("/")[0])
    assert [remaining(get(web)) for _ in range(2)] == [quota - 1, quota - 2]
    return app, web


def calls(port: int, command: str) -> int:
    """How many times the server on ``port`` ran ``command`` (lower case)."""
    stats = str(redis_command(port, "INFO", "commandstats"))
    found = re.search(rf"cmdstat_{command}:calls=(\d+)", stats)
    return int(found[1]) if found else 0


def assert_the_new_master_decides(app: Flask, web: Any, old: int, new: int, commands: list[tuple[Any, str]]) -> None:
    """After a failover from ``old`` to ``new``, the next requests are decided
    on the new master: the old master saw no call, and nothing was replayed
    (the new master only had to be sent the script)."""
    redis_command(old, "CONFIG", "RESETSTAT")
    redis_command(new, "CONFIG", "RESETSTAT")
    del commands[:]
    assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
    assert calls(old, "evalsha") == 0
    assert calls(new, "evalsha") == 3
    assert scripts(commands) == ["EVALSHA", "EVAL", "EVALSHA", "EVALSHA"]


def test_a_disconnected_pool_reconnects_on_the_next_request(
    server: RedisServer, commands: list[tuple[Any, str]]
) -> None:
    app, web = started(server.url, "5/m")
    storage_of(app).client.close()  # the pool's disconnect()
    del commands[:]
    assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
    assert scripts(commands) == ["EVALSHA"] * 3  # on a fresh connection, not replayed
    storage_of(app).close()


def test_a_restart_is_survived_by_the_next_request(commands: list[tuple[Any, str]]) -> None:
    with redis_server() as server:
        app, web = started(server.url, "5/m")
        server.stop()
        server.start()
        del commands[:]
        # The pooled connection's server is gone: redis-py's pool finds it
        # closed and connects again, then the script the new server lacks
        # is loaded. The restart lost the counts.
        assert remaining(get(web)) == 4
        assert scripts(commands) == ["EVALSHA", "EVAL"]
        assert [remaining(get(web)) for _ in range(2)] == [3, 2]
        assert scripts(commands) == ["EVALSHA", "EVAL", "EVALSHA", "EVALSHA"]
        storage_of(app).close()


def test_without_retries_a_restart_is_survived_too(commands: list[tuple[Any, str]]) -> None:
    with redis_server() as server:
        options = {"retry": Retry(NoBackoff(), 0)}
        app, web = started(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS=options)
        server.stop()
        server.start()
        del commands[:]
        # redis-py is told not to retry: its pool's checkout finds the
        # connection the restart closed before anything is sent on it.
        assert remaining(get(web)) == 4
        assert scripts(commands) == ["EVALSHA", "EVAL"]
        assert [remaining(get(web)) for _ in range(2)] == [3, 2]
        storage_of(app).close()


def test_a_pooled_connection_is_health_checked(server: RedisServer) -> None:
    app, web = started(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS={"health_check_interval": 0.05})
    time.sleep(0.2)  # past the interval: the next send PINGs first
    before = calls(server.port, "ping")
    assert remaining(get(web)) == 2
    assert calls(server.port, "ping") - before == 1
    storage_of(app).close()


def test_after_a_failover_a_disconnected_pool_reaches_the_new_master(commands: list[tuple[Any, str]]) -> None:
    with redis_sentinel_group() as group:
        app, web = started(group.url, "5/m")
        old, new = fail_over(group)
        # The app resets its connections, as after a failover it noticed:
        # the new ones connect to the master the sentinel names.
        storage_of(app).client.connection_pool.disconnect()
        assert_the_new_master_decides(app, web, old, new, commands)
        close_sentinel_app(app)


def test_after_a_failover_a_pooled_connection_to_the_old_master_is_dropped(commands: list[tuple[Any, str]]) -> None:
    with redis_sentinel_group() as group:
        app, web = started(group.url, "5/m")
        old, new = fail_over(group)
        # A connection the pool makes asks the sentinel, and so the pool
        # learns the new master; the pooled connection still points at the
        # old one, which redis-py's pool drops before use.
        assert storage_of(app).client.ping()
        assert_the_new_master_decides(app, web, old, new, commands)
        close_sentinel_app(app)
