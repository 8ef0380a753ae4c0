"""The lean client path (:mod:`flask_redis_throttle.core.wire`) on real servers:
it is really taken, it counts exactly, and every way a connection can fail
under it is handed to redis-py's normal path only where nothing can be
counted twice."""

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
from helpers import evalsha_calls, get, install, join_all
from redis._parsers import _RESP2Parser
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import redis_command, redis_sentinel_group, tls_proxy

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.core import wire
from flask_redis_throttle.core.codec import entry
from flask_redis_throttle.core.rates import Layer
from flask_redis_throttle.core.storage import Storage
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
def commands(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The commands sent through redis-py's normal command path."""
    sent: list[tuple[Any, ...]] = []
    original = redis.Redis.execute_command

    def spy(self: redis.Redis, *args: Any, **options: Any) -> Any:
        sent.append(args)
        return original(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", spy)
    return sent


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    """The session's server, emptied, its command stats reset."""
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushall()
    admin.config_resetstat()
    admin.script_flush()
    admin.close()
    return redis_server


def scripts(commands: list[tuple[Any, ...]]) -> list[str]:
    """The script calls among ``commands`` (a 429 also logs the refusal with XADD)."""
    return [str(args[0]) for args in commands if args[0] in ("EVAL", "EVALSHA")]


def remaining(response: Any) -> int:
    return int(response.headers.get("X-RateLimit-Remaining", -1))


def kept(app: Flask) -> list[Any]:
    """The connections the app's lean path keeps between requests."""
    lean = storage_of(app).lean
    assert isinstance(lean, wire.LeanClient)
    return lean._free


def local_port(conn: Any) -> int:
    """The local port of ``conn``'s socket: a new connection has a new one."""
    port: int = conn._sock.getsockname()[1]
    return port


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


def test_the_lean_path_is_taken_and_redis_py_command_path_is_not(
    server: RedisServer, commands: list[tuple[Any, ...]]
) -> None:
    app = limited_app(server.url, "5/m")
    assert storage_of(app).lean is not None
    assert statuses(app, 7) == [200] * 5 + [429] * 2
    # The first request met NOSCRIPT and loaded the script with EVAL, on
    # redis-py's path; every other one went the lean way.
    assert scripts(commands) == ["EVAL"]
    admin = redis.Redis.from_url(server.url)
    assert evalsha_calls(admin) == 7
    admin.close()
    storage_of(app).close()


def test_threads_count_exactly_on_the_lean_path(server: RedisServer) -> None:
    app = limited_app(server.url, "100/m")
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
    storage_of(app).close()


def test_a_connection_killed_under_the_lean_path_is_replayed_and_counted_once(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, commands: list[tuple[Any, ...]]
) -> None:
    app = limited_app(server.url, "5/m")
    web = app.test_client()
    assert remaining(get(web)) == 4  # the script is loaded, a connection pooled
    admin = redis.Redis.from_url(server.url)
    pool = storage_of(app).client.connection_pool
    original = pool.get_connection
    killed: list[int] = []

    def get_connection(*args: Any, **kwargs: Any) -> Any:
        # The pool hands out a live connection; the server then drops it
        # before the lean path sends anything on it.
        conn = original(*args, **kwargs)
        if not killed:
            conn.send_command("CLIENT", "ID")
            killed.append(int(conn.read_response()))
            admin.client_kill_filter(_id=killed[0])
        return conn

    monkeypatch.setattr(pool, "get_connection", get_connection)
    del commands[:]
    before = evalsha_calls(admin)
    response = get(web)
    assert response.status_code == 200
    assert remaining(response) == 3  # counted once
    assert killed
    # The lean call failed on the killed connection and was replayed once
    # through redis-py's normal path, which reconnected.
    assert scripts(commands) == ["EVALSHA"]
    assert evalsha_calls(admin) - before == 1
    assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
    admin.close()
    storage_of(app).close()


def test_a_timeout_on_the_lean_path_is_not_replayed(
    server: RedisServer, commands: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    app = limited_app(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 0.3})
    web = app.test_client()
    assert remaining(get(web)) == 4
    admin = redis.Redis.from_url(server.url)
    before = evalsha_calls(admin)
    del commands[:]
    # DEBUG SLEEP blocks the server longer than the socket timeout: the
    # script is sent, times out on our side, and runs when Redis wakes up.
    sleeper = threading.Thread(target=admin.execute_command, args=("DEBUG", "SLEEP", "1"))
    sleeper.start()
    time.sleep(0.1)
    with caplog.at_level("WARNING", "flask_redis_throttle"):
        response = get(web)
    join_all([sleeper], deadline=10, what="DEBUG SLEEP")
    assert response.status_code == 200  # failed open, after one timeout
    assert "Timeout" in caplog.records[-1].getMessage()
    assert scripts(commands) == []  # not replayed
    # The timed-out call ran once, when Redis woke up: counted once, not twice.
    assert evalsha_calls(admin) - before == 1
    assert remaining(get(web)) == 2
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
    [parent] = kept(app)  # the lean path's connection, kept between requests
    port = local_port(parent)
    read, write = os.pipe()
    pid = fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            response = get(app.test_client())
            [child] = kept(app)
            report = f"{response.status_code} {remaining(response)} {child is parent} {local_port(child) == port}"
        except BaseException as error:
            report = repr(error)
        os.write(write, report.encode())
        os._exit(0)
    os.close(write)
    status = wait_for_child(pid, deadline=30)
    report = os.read(read, 1000).decode()
    os.close(read)
    assert status == 0
    # Counted once in the child, on a connection of its own: the parent's
    # socket was never read by two processes.
    assert report == "200 2 False False"
    assert [remaining(get(web)) for _ in range(2)] == [1, 0]
    # The parent kept its own connection, which still reads its own replies.
    assert kept(app) == [parent]
    assert local_port(parent) == port
    storage.close()


def test_without_hiredis_the_lean_path_uses_redis_pys_parser(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, commands: list[tuple[Any, ...]]
) -> None:
    monkeypatch.setattr(wire.connection, "hiredis", None)
    pool = redis.ConnectionPool.from_url(server.url, parser_class=_RESP2Parser, socket_timeout=0.5)
    client = redis.Redis(connection_pool=pool)
    app = limited_app(spec="3/m", client=client)
    lean = storage_of(app).lean
    assert lean is not None
    assert not lean.hiredis
    assert statuses(app, 4) == [200, 200, 200, 429]
    assert scripts(commands) == ["EVAL"]
    client.close()


def test_resp3_stays_on_redis_pys_path(server: RedisServer, commands: list[tuple[Any, ...]]) -> None:
    app = limited_app(server.url, "3/m", RATELIMIT_STORAGE_OPTIONS={"protocol": 3})
    assert storage_of(app).lean is None
    assert statuses(app, 4) == [200, 200, 200, 429]
    assert scripts(commands) == ["EVALSHA", "EVAL", "EVALSHA", "EVALSHA", "EVALSHA"]
    storage_of(app).close()


def test_tls_takes_the_lean_path(server: RedisServer, commands: list[tuple[Any, ...]]) -> None:
    with tls_proxy(server.port) as proxy:
        app = limited_app(proxy.url, "3/m", RATELIMIT_STORAGE_OPTIONS={"ssl_ca_certs": proxy.ca_file})
        assert storage_of(app).lean is not None
        assert statuses(app, 4) == [200, 200, 200, 429]
        assert scripts(commands) == ["EVAL"]
        storage_of(app).close()


def test_a_unix_socket_takes_the_lean_path(tmp_path: Any, commands: list[tuple[Any, ...]]) -> None:
    path = tmp_path / "redis.sock"
    with redis_server(["--unixsocket", str(path), "--unixsocketperm", "700"]):
        app = limited_app(f"unix://{path}", "3/m")
        assert storage_of(app).lean is not None
        assert statuses(app, 4) == [200, 200, 200, 429]
        assert scripts(commands) == ["EVAL"]
        storage_of(app).close()


def test_the_embedded_store_stays_on_its_path_and_a_cluster_takes_its_own(redis_cluster: Any) -> None:
    assert Storage.from_url("memory://").lean is None
    cluster = Storage.from_url(redis_cluster.url)
    # A cluster's lean path is its own (tests/test_lean_cluster.py).
    assert isinstance(cluster.lean, wire.LeanCluster)
    assert cluster.lean.fits()
    cluster.close()


def test_keys_and_arguments_are_encoded_as_redis_py_encodes_them() -> None:
    packer = redis.Connection().pack_command
    keys, args = ["rl:{ip:192.0.2.1}:fw:1", "rl:{ip:192.0.2.1}:fw:60"], [0, 1, "fwfw", 5, 1_000_000, 1.5]
    expected = b"".join(packer("EVALSHA", "a" * 40, 2, *keys, *args))
    assert wire.pack_evalsha("a" * 40, keys, args) == expected
    # Equal values of other types are encoded as redis-py encodes each,
    # whatever was encoded and cached before.
    for value in (7, 7.0):
        assert wire.pack_evalsha("a" * 40, keys, [value]) == b"".join(packer("EVALSHA", "a" * 40, 2, *keys, value))
    with pytest.raises(redis.DataError, match="bool"):
        wire.pack_evalsha("a" * 40, keys, [True])
    with pytest.raises(redis.DataError, match="bool"):
        wire.pack_evalsha("a" * 40, keys, [1, True])


def test_a_call_packed_around_its_time_is_the_call_packed_whole() -> None:
    """A call the storage keeps packed but for its time, with the time put
    in, is byte for byte the command redis-py would send: for Redis's own
    clock (an empty argument) and for a pinned time."""
    packer = redis.Connection().pack_command
    keys, plan = ["rl:{ip:192.0.2.1}:s:fw", "rl:{user:7}:s:fw"], b"fw\x01\x05\x00\x00\x00\x01\x00\x00\x00\x00"
    for now in ("", 0, 1_800_000_000_000_000):
        before, after = wire.pack_around("a" * 40, keys, [now, 3, plan])
        expected = b"".join(packer("EVALSHA", "a" * 40, 2, *keys, now, 3, plan))
        assert before + wire.pack_time(now) + after == expected


def test_a_call_is_packed_once_per_keys_cost_and_plan_and_the_packed_calls_are_bounded(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage keeps each call's script and bytes, so that a request
    like one before is one lookup; a flood of new identities does not grow
    what it keeps past its bound; and a cost that is not an int (1.0, equal
    to 1 but sent as 1.0) is packed anew, not sent as 1's bytes."""
    app = limited_app(server.url, "100/m")
    storage = storage_of(app)
    assert statuses(app, 3) == [200] * 3
    assert len(storage._calls) == 1
    monkeypatch.setattr("flask_redis_throttle.core.storage.KEY_CACHE_SIZE", 4)
    web = app.test_client()
    for number in range(10):
        assert get(web, ip=f"192.0.2.{number + 10}").status_code == 200
        assert len(storage._calls) <= 4
    names, keys = frozenset(["fixed-window"]), ["rl:{ip:x}:float:fw"]
    plan = entry("fw", [Layer(5, 60)])
    kept = dict(storage._calls)
    assert storage.evaluate(names, keys, ["", 1.0, plan])[:3] == [1, 1, 4]
    assert storage._calls == kept
    storage.close()


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


def test_a_sentinel_failover_moves_the_lean_path_to_the_new_master() -> None:
    with redis_sentinel_group() as group:
        app = limited_app(group.url, "5/m")
        assert storage_of(app).lean is not None
        web = app.test_client()
        assert [remaining(get(web)) for _ in range(2)] == [4, 3]
        # A graceful failover: the old master lives on as a replica, and the
        # kept connection to it is either closed by the sentinel or
        # answered READONLY; either way the next request is decided on the
        # new master, which has the replicated counts.
        fail_over(group)
        assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
        assert get(web).status_code == 429
        close_sentinel_app(app)


def test_clients_the_lean_path_does_not_fit_stay_on_redis_pys_path(server: RedisServer) -> None:
    class Traced(redis.Connection):
        """A connection class of the app's own, which may send differently."""

    single = redis.Redis.from_url(server.url, single_connection_client=True)
    custom = redis.Redis(connection_pool=redis.ConnectionPool.from_url(server.url, connection_class=Traced))
    resp3 = redis.Redis.from_url(server.url, protocol=3)
    for n, client in enumerate((single, custom, resp3)):
        assert wire.lean_client(client) is None
        app = limited_app(spec="2/m", client=client)
        assert statuses(app, 3, ip=f"192.0.2.{n + 10}") == [200, 200, 429]
        client.close()
    plain = redis.Redis.from_url(server.url)
    assert wire.lean_client(plain) is not None
    plain.close()


# -- Connections kept between calls ------------------------------------------


def checkouts(pool: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each ``get_connection`` and ``release`` made on ``pool`` from now on."""
    calls: list[str] = []
    for name in ("get_connection", "release"):
        original = getattr(pool, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(pool, name, spy)
    return calls


def started(url: str, spec: str = "5/m", **config: Any) -> tuple[Flask, Any]:
    """An app on ``url`` limiting ``/`` to ``spec``, and its test client, after
    two requests: the first meets NOSCRIPT and loads the script through
    redis-py's path, the second leaves the app a kept connection."""
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


def assert_the_new_master_decides(app: Flask, web: Any, old: int, new: int, commands: list[tuple[Any, ...]]) -> None:
    """After a failover from ``old`` to ``new``, the next requests are decided
    on the new master, on a kept connection to it: the old master saw no
    call, and nothing was replayed (the new master only had to be sent the
    script)."""
    redis_command(old, "CONFIG", "RESETSTAT")
    del commands[:]
    assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
    assert calls(old, "evalsha") == 0
    assert scripts(commands) == ["EVAL"]
    assert [conn.port for conn in kept(app)] == [new]


def test_a_kept_connection_serves_every_request_without_the_pool(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, commands: list[tuple[Any, ...]]
) -> None:
    app, web = started(server.url, "100/m")
    pool = storage_of(app).client.connection_pool
    [conn] = kept(app)
    port = local_port(conn)
    calls = checkouts(pool, monkeypatch)
    del commands[:]
    assert [remaining(get(web)) for _ in range(50)] == list(range(97, 47, -1))
    # One connection served them all, never checked out of the pool again
    # nor reconnected.
    assert calls == []
    assert scripts(commands) == []
    assert kept(app) == [conn]
    assert local_port(conn) == port
    assert pool._created_connections == 1
    storage_of(app).close()


def test_a_connection_marked_for_reconnection_is_not_kept_in_use(server: RedisServer) -> None:
    """redis-py marks the connections a pool has in use for reconnection
    when their server moves (maintenance notifications, a failed cluster
    node): a kept connection so marked goes back to the pool, which closes
    it, and the next request is decided on a fresh one."""
    app, web = started(server.url, "100/m")
    [conn] = kept(app)
    port = local_port(conn)
    storage_of(app).client.connection_pool.update_active_connections_for_reconnect()
    assert remaining(get(web)) == 97
    [fresh] = kept(app)
    assert local_port(fresh) != port
    storage_of(app).close()


def test_threads_share_a_bounded_set_of_kept_connections(server: RedisServer) -> None:
    app = limited_app(server.url, "100/m")
    pool = storage_of(app).client.connection_pool
    results: list[int] = []
    lock = threading.Lock()
    threads_n = wire.KEEP + 4

    def hammer() -> None:
        web = app.test_client()
        mine = [get(web).status_code for _ in range(20)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=hammer) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    join_all(threads, deadline=60, what="the request threads")
    assert sorted(results) == [200] * 100 + [429] * (20 * threads_n - 100)
    # A thread holds one connection at a time, and at most KEEP more are
    # kept idle (redis-py's path, the refusals' log here, cannot take them);
    # the rest are idle in the pool, and none is lost: the pool counts
    # every kept one as in use.
    assert pool._created_connections <= threads_n + wire.KEEP
    assert 1 <= len(kept(app)) <= wire.KEEP
    assert len(kept(app)) + len(pool._available_connections) == pool._created_connections
    assert pool._in_use_connections == set(kept(app))
    storage_of(app).close()


def test_a_small_pool_keeps_half_its_connections_free_for_redis_py(server: RedisServer) -> None:
    app = limited_app(server.url, "100/m", RATELIMIT_STORAGE_OPTIONS={"max_connections": 3})
    lean = storage_of(app).lean
    assert isinstance(lean, wire.LeanClient)
    assert lean._keep == 1
    assert statuses(app, 3) == [200] * 3
    assert len(kept(app)) == 1
    single = limited_app(server.url, "100/m", RATELIMIT_STORAGE_OPTIONS={"max_connections": 1})
    # A pool of one keeps nothing: redis-py's path (EVAL after NOSCRIPT,
    # the refusal's log) still finds its one connection.
    assert statuses(single, 3, ip="192.0.2.2") == [200] * 3
    assert kept(single) == []
    for each in (app, single):
        storage_of(each).close()


def test_a_disconnected_pool_closes_kept_connections_and_the_next_request_reconnects(
    server: RedisServer, commands: list[tuple[Any, ...]]
) -> None:
    app, web = started(server.url, "5/m")
    [conn] = kept(app)
    port = local_port(conn)
    storage_of(app).client.close()  # the pool's disconnect(): kept connections too
    assert conn._sock is None
    del commands[:]
    assert [remaining(get(web)) for _ in range(3)] == [2, 1, 0]
    # Decided on the lean path, on a fresh connection, not replayed.
    assert scripts(commands) == []
    [again] = kept(app)
    assert local_port(again) != port
    storage_of(app).close()


def test_a_server_restarted_between_two_requests_is_reconnected_to(commands: list[tuple[Any, ...]]) -> None:
    with redis_server() as server:
        app, web = started(server.url, "5/m")
        server.stop()
        server.start()
        del commands[:]
        # The kept connection's server is gone: the call fails on it and is
        # made again through redis-py, which reconnects, then loads the
        # script the new server lacks. The restart lost the counts.
        assert remaining(get(web)) == 4
        assert scripts(commands) == ["EVALSHA", "EVAL"]
        assert [remaining(get(web)) for _ in range(2)] == [3, 2]
        assert scripts(commands) == ["EVALSHA", "EVAL"]  # back on the lean path
        storage_of(app).close()


def test_without_retries_a_restart_is_found_before_the_send(commands: list[tuple[Any, ...]]) -> None:
    with redis_server() as server:
        options = {"retry": Retry(NoBackoff(), 0)}
        app, web = started(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS=options)
        server.stop()
        server.start()
        del commands[:]
        # redis-py is told not to retry, so a failed call could not be
        # replayed: the kept connection is polled before the send, as the
        # pool polls its own, and the request is decided on a new one.
        assert remaining(get(web)) == 4
        assert scripts(commands) == ["EVAL"]
        assert [remaining(get(web)) for _ in range(2)] == [3, 2]
        storage_of(app).close()


def test_a_kept_connection_is_health_checked(server: RedisServer) -> None:
    app, web = started(server.url, "5/m", RATELIMIT_STORAGE_OPTIONS={"health_check_interval": 0.05})
    assert len(kept(app)) == 1
    time.sleep(0.2)  # past the interval: the next send PINGs first
    before = calls(server.port, "ping")
    assert remaining(get(web)) == 2
    assert calls(server.port, "ping") - before == 1
    storage_of(app).close()


def test_after_a_failover_a_disconnected_pool_reaches_the_new_master(commands: list[tuple[Any, ...]]) -> None:
    with redis_sentinel_group() as group:
        app, web = started(group.url, "5/m")
        old, new = fail_over(group)
        # The app resets its connections, as after a failover it noticed:
        # the kept one, to the old master, is closed with the rest, and the
        # new ones connect to the master the sentinel names.
        storage_of(app).client.connection_pool.disconnect()
        assert_the_new_master_decides(app, web, old, new, commands)
        close_sentinel_app(app)


class Token:
    """A streaming credential provider's new token, for the default user
    (which has no password, so any password authenticates it)."""

    def try_get(self, name: str) -> str:
        return "default"

    def get_value(self) -> str:
        return "any"


def test_a_kept_connection_given_a_new_token_is_reauthenticated(server: RedisServer) -> None:
    app, web = started(server.url, "5/m")
    [conn] = kept(app)
    auths = calls(server.port, "auth")
    # What redis-py does when the provider streams a new token: idle pooled
    # connections authenticate at once, ones in use (a kept one is) when
    # they are released.
    storage_of(app).client.connection_pool.re_auth_callback(Token())
    assert remaining(get(web)) == 2
    assert calls(server.port, "auth") - auths == 1
    assert conn._re_auth_token is None
    assert [remaining(get(web)) for _ in range(2)] == [1, 0]
    storage_of(app).close()


def test_after_a_failover_a_kept_connection_to_the_old_master_is_dropped(commands: list[tuple[Any, ...]]) -> None:
    with redis_sentinel_group() as group:
        app, web = started(group.url, "5/m")
        old, new = fail_over(group)
        # A connection the pool makes asks the sentinel, and so the pool
        # learns the new master; the kept connection still points at the
        # old one, which is dropped before use, as the pool drops its own.
        assert storage_of(app).client.ping()
        assert_the_new_master_decides(app, web, old, new, commands)
        close_sentinel_app(app)
