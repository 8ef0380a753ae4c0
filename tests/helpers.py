"""Helpers the tests share: building apps, sending requests, the pinned
clock, threads, log records and a failing script call. The fixtures that use them are in
``conftest.py``; tests import these by name (``from helpers import get``).
"""

from __future__ import annotations

import http.client
import io
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from importlib.metadata import entry_points
from typing import Any
from unittest import mock

import click
import pytest
import redis
from click.testing import Result
from flask import Flask, request
from flask.cli import FlaskGroup
from flask_login import LoginManager, UserMixin
from hypothesis import strategies as st

from flask_redis_throttle import Identity, RateLimit, StorageUnavailable, limit
from flask_redis_throttle.cli import ratelimit
from flask_redis_throttle.compat.flask_limiter import Limiter
from flask_redis_throttle.compat.flask_limiter.util import get_remote_address
from flask_redis_throttle.core.engine.throttle import Throttle
from flask_redis_throttle.extension import RateLimitState

#: A second boundary in microseconds, to pin the scripts' clock at.
T0 = 1_800_000_000 * 1_000_000


def install(app: Flask, **config: Any) -> RateLimitState:
    """Set config, install the extension, and return its state."""
    app.config.update(config)
    RateLimit(app)
    state: RateLimitState = app.extensions["ratelimit"]
    return state


class Clock:
    """The time every throttle of a test decides at, in seconds after :data:`T0`.

    The autouse ``clock`` fixture installs one for every test, through
    :func:`pinned_clock`, so that counts never depend on where the wall
    clock falls: a ``1/m`` window that two requests straddle on a slow
    machine cannot turn a 429 into a 200.
    """

    def __init__(self) -> None:
        self.at = 0.0

    def set(self, seconds: float) -> None:
        """Move to ``seconds`` after :data:`T0` (backwards too)."""
        self.at = seconds

    def advance(self, seconds: float) -> None:
        self.at += seconds

    def micros(self) -> int:
        return T0 + round(self.at * 1_000_000)


@contextmanager
def pinned_clock() -> Iterator[Clock]:
    """Pin the scripts' clock of every :class:`Throttle` built in the block,
    its fallback's and the CLI's included, at :data:`T0` plus :attr:`Clock.at`.

    The autouse ``clock`` fixture runs every test in one; a script that
    runs without pytest (``tests/test_cli_samples.py``) opens its own.
    """
    pinned = Clock()

    def now(self: Throttle) -> int:
        return pinned.micros()

    with mock.patch.object(Throttle, "now", now):
        yield pinned


class FakeMonotonic:
    """A monotonic clock the test moves (``clock.now += 5.0``), for a
    circuit breaker's back-off and the warnings' interval, so that no
    assertion depends on how fast the machine runs. Not the scripts' clock:
    that is :class:`Clock`."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def evalsha_calls(client: redis.Redis) -> int:
    """How many EVALSHA calls ``client``'s server has run since its stats were reset."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def command_names(packed: Any) -> list[str]:
    """The names of the commands (upper case) in what a connection's
    ``send_packed_command`` was given: one command, or a pipeline's."""
    data = b"".join(packed) if isinstance(packed, (list, tuple)) else bytes(packed)
    names: list[str] = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\r\n", pos)
        count, pos = int(data[pos + 1 : end]), end + 2
        for n in range(count):
            end = data.index(b"\r\n", pos)
            length, pos = int(data[pos + 1 : end]), end + 2
            if n == 0:
                names.append(data[pos : pos + length].decode().upper())
            pos += length + 2
    return names


def spy_sends(monkeypatch: pytest.MonkeyPatch, only: Sequence[str] = ()) -> list[tuple[Any, str]]:
    """What every redis-py connection sends from now on, however it was
    asked to (a client's command, a pipeline, the storage's kept
    connections): one entry per command each time it is sent (a command
    sent again shows twice), the connection's port (or socket path) and
    the command's name, upper case; only the commands named in ``only``,
    if given."""
    sent: list[tuple[Any, str]] = []
    owner = next(cls for cls in redis.connection.Connection.__mro__ if "send_packed_command" in vars(cls))
    original = owner.send_packed_command

    def spy(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        where = getattr(self, "port", None) or getattr(self, "path", None)
        sent.extend((where, name) for name in command_names(command) if not only or name in only)
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(owner, "send_packed_command", spy)
    return sent


def align_to_window(period: float, within: float = 0.05) -> float:
    """Sleep until the wall clock, which is Redis's clock on this machine, is
    at most ``within`` seconds past the start of a ``period``-second window,
    and return how far past it is. A sleep that a loaded machine stretches
    past ``within`` is tried again, so a real-clock test always starts with
    ``period - within`` seconds of its window ahead of it.
    """
    while True:
        into = time.time() % period
        if into <= within:
            return into
        time.sleep(period - into + within / 4)


def join_all(threads: Sequence[threading.Thread], deadline: float, what: str) -> None:
    """Join ``threads``, failing with a message if any is still running
    ``deadline`` seconds from now, long before the suite's timeout."""
    end = time.monotonic() + deadline
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        pytest.fail(f"{what}: {len(stuck)} thread(s) still running after {deadline} s: {', '.join(stuck)}")


class User(UserMixin):
    def __init__(self, user_id: str) -> None:
        self.id = user_id


def wait_for_gunicorn(port: int, process: subprocess.Popen[bytes], path: str = "/", timeout: float = 30.0) -> None:
    """Wait until the gunicorn started as ``process`` answers ``GET path`` on ``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "gunicorn exited"
        # Closed whether it answered or not: a refused one left to the
        # garbage collector is a ResourceWarning, and a loaded machine,
        # slower to start gunicorn, makes many.
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", path)
            connection.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
        finally:
            connection.close()
    raise AssertionError(f"gunicorn did not answer on port {port} within {timeout} s")


def limited_app(url: str, spec: str, **config: Any) -> Flask:
    """An app on ``url`` limiting ``/`` to ``spec`` per IP and per user
    (``X-User``), with no block cache, so that every request reaches Redis."""
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=url, RATELIMIT_BLOCK_CACHE_SIZE=0)
    add_login(app)

    @app.get("/")
    @limit(spec)
    def index() -> str:
        return "ok"

    install(app, **config)
    return app


def add_login(app: Flask) -> None:
    """Flask-Login, with the user taken from an ``X-User`` header, so tests
    can be anyone from any IP without a session."""
    manager = LoginManager(app)

    @manager.request_loader
    def load(req: Any) -> User | None:
        name = request.headers.get("X-User")
        return User(name) if name else None


def flask_command(app: Flask, *args: str) -> Result:
    """Run ``flask <args>`` on ``app`` as the ``flask`` command would: with the
    commands installed packages register through the ``flask.commands``
    entry point, which is how ``flask ratelimit`` is found."""
    commands = {entry.name: entry.load() for entry in entry_points(group="flask.commands")}
    return app.test_cli_runner().invoke(click.Group("flask", commands=commands), args=list(args), prog_name="flask")


#: How a process that serves none of the app's requests runs a command of
#: ``flask ratelimit``: the ``flask`` command, a script's own click group, the
#: app's ``app.cli`` through its CLI runner, and ``app.cli.main``.
ELSEWHERE = ("flask", "own group", "app.cli", "app.cli.main")


def run_elsewhere(way: str, app: Flask, *args: str) -> tuple[int, str]:
    """Run ``ratelimit <args>`` on ``app`` the ``way`` of :data:`ELSEWHERE`:
    its exit status and what it wrote."""
    app.cli.add_command(ratelimit)
    with mock.patch.dict(os.environ):  # FlaskGroup sets FLASK_RUN_FROM_CLI
        if way == "app.cli.main":
            out = io.StringIO()
            with app.app_context(), redirect_stdout(out), redirect_stderr(out), pytest.raises(SystemExit) as exit:
                app.cli.main(["ratelimit", *args], prog_name="manage")
            return int(exit.value.code or 0), out.getvalue()
        group = {
            "flask": FlaskGroup(add_default_commands=False, load_dotenv=False),
            "own group": click.Group("manage"),
            "app.cli": app.cli,
        }[way]
        if group is not app.cli:
            group.add_command(ratelimit)
        result = app.test_cli_runner().invoke(group, ["ratelimit", *args])
        return result.exit_code, result.output


def get(client: Any, path: str = "/", ip: str = "192.0.2.1", user: str | None = None, **kwargs: Any) -> Any:
    """GET ``path`` from ``ip``, logged in as ``user`` if given."""
    headers = dict(kwargs.pop("headers", {}))
    if user is not None:
        headers["X-User"] = user
    return client.get(path, environ_base={"REMOTE_ADDR": ip}, headers=headers, **kwargs)


Statuses = Callable[..., list[int]]


def extension_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of the extension's own logger: its per-request warnings,
    without the circuit breakers' opening and closing, which go to
    ``flask_redis_throttle.breaker`` and are checked in test_logging.py."""
    return [r for r in caplog.records if r.name != "flask_redis_throttle.breaker"]


def failing_hits(state: RateLimitState, error: Exception, fails: Callable[[Any, int], bool]) -> None:
    """Make the script calls of ``state``'s throttle whose checks and cost
    ``fails`` picks raise ``error``, as the storage would on one call of a
    request and not on another."""
    assert state.throttle is not None
    hit = state.throttle.hit

    def failing(checks: Any, cost: int = 1) -> Any:
        if fails(checks, cost):
            raise error
        return hit(checks, cost)

    state.throttle.hit = failing  # type: ignore[method-assign]


#: A test's two failures of a call after the decision: Redis's, and a bug
#: (an internal error), as ``error`` and what the log says of each.
storage_faults = pytest.mark.parametrize(
    ("error", "logged"),
    [
        (StorageUnavailable("gone"), "rate limit storage unavailable (gone)"),
        (TypeError("a bug"), "internal error in rate limiting ("),
    ],
    ids=["storage-unavailable", "bug"],
)

# --- the scripts stepped through requests, for the property tests ---------------------------------

#: A second, in the scripts' microseconds.
SECOND = 1_000_000

#: Gaps between requests: often within a sub-bucket, sometimes exactly on or
#: one microsecond around the boundaries that matter, sometimes long.
gaps = st.one_of(
    st.integers(0, SECOND // 4),
    st.sampled_from([0, 1, SECOND // 10 - 1, SECOND // 10, SECOND // 3, SECOND - 1, SECOND, 2 * SECOND]),
    st.integers(0, 4 * SECOND),
)
#: A limit's layers, as (quota, window in seconds), windows distinct.
layer_lists = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 3, 5]), st.sampled_from([1, 2, 3, 60])),
    min_size=1,
    max_size=3,
    unique_by=lambda r: r[1],
)
#: The two identities a step's request may come from, by number.
STEP_IDENTITIES = (Identity("ip", "192.0.2.1"), Identity("user", "42"))


#: The sizes in bytes of the fields of each packed strategy's records (by
#: its code, the key's last part), the window first, as its Lua file packs
#: them: little-endian unsigned integers.
RECORD_FIELDS = {"fw": (4, 6, 4), "gc": (4, 8, 4), "sw": (4, 6) + (4,) * 11}


def packed_records(key: str | bytes, value: bytes | None) -> dict[int, tuple[int, ...]]:
    """The records of the packed key ``key``'s ``value``: each one's fields
    after the window, by window."""
    code = (key.decode() if isinstance(key, bytes) else key).rsplit(":", 1)[1]
    sizes = RECORD_FIELDS[code]
    value = value or b""
    assert len(value) % sum(sizes) == 0, value
    records = {}
    at = 0
    while at < len(value):
        fields = []
        for size in sizes:
            fields.append(int.from_bytes(value[at : at + size], "little"))
            at += size
        records[fields[0]] = tuple(fields[1:])
    return records


def request_steps(max_size: int) -> st.SearchStrategy[list[tuple[int, int, tuple[int, ...], bool]]]:
    """Requests one after another: each its gap after the last, its cost
    (0 inspects), which of :data:`STEP_IDENTITIES` send it, and whether it is
    refunded at once, as a cluster does."""
    return st.lists(
        st.tuples(
            gaps,
            st.sampled_from([1, 1, 1, 1, 2, 3, 0, 7]),
            st.sampled_from([(0,), (1,), (0, 1)]),
            st.sampled_from([False, False, False, True]),
        ),
        min_size=1,
        max_size=max_size,
    )


def limiter_for(app: Flask, url: str, **arguments: Any) -> Limiter:
    """A Flask-Limiter shim's ``Limiter`` on ``app``, counting by address, on ``url``."""
    return Limiter(get_remote_address, app=app, storage_uri=url, **arguments)


def statuses(client: Any, count: int, path: str = "/", **kwargs: Any) -> list[int]:
    """The status codes of ``count`` requests to ``path``, one after the other."""
    return [get(client, path, **kwargs).status_code for _ in range(count)]
