"""End to end: requests per second through a real WSGI server.

``suite.py`` uses this module. It starts gunicorn (``gthread`` workers, with
keep-alive) on free loopback ports, one server per limiter, serving
:func:`harness.create_app`, and drives them with a bounded load generator: a few threads,
each with one keep-alive ``http.client`` connection to 127.0.0.1, sending
``GET /`` until a request budget or a time limit is spent, whichever comes
first. The servers run side by side and are loaded in turn, round after
round, rotating the order, so that the noise of a shared machine falls on all
of them alike. Every gunicorn is started in its own process group and the
group is killed when the block ends, whatever happens.
"""

from __future__ import annotations

import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from typing import IO, Any

from harness import FLASK_LIMITER_HEADER, OUR_HEADER, USER

from flask_redis_throttle.testing import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "127.0.0.1"
#: Every request names the same user: one hot identity pair (the address and the user).
HEADERS = {"X-User": USER}


@dataclass(frozen=True)
class ServerSettings:
    """How each gunicorn runs."""

    workers: int = 2
    threads: int = 4
    keep_alive: int = 30


@dataclass(frozen=True)
class Target:
    """One server to start: its name, label, ``BENCH_LIMITER`` (what
    :func:`harness.create_app` serves) and a header its answers must carry,
    to show the limiter is at work."""

    name: str
    label: str
    limiter: str
    header: str | None = None


#: The servers the suite compares, the baseline first.
TARGETS = (
    Target("none", "no limiter", "none"),
    Target("floor", "Flask app + 1 PING/request (floor)", "floor"),
    Target("ours", "ours fixed-window", "ours", OUR_HEADER),
    Target("fl", "Flask-Limiter fixed-window", "flask-limiter", FLASK_LIMITER_HEADER),
)


@dataclass
class Server:
    """One running gunicorn."""

    name: str
    label: str
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    #: Requests per second, one figure per measured round.
    rates: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0


def gunicorn_command(port: int, settings: ServerSettings) -> list[str]:
    """The command line of one gunicorn serving ``harness:create_app()``."""
    return [
        sys.executable, "-m", "gunicorn",
        "--bind", f"{HOST}:{port}",
        "--workers", str(settings.workers),
        "--worker-class", "gthread",
        "--threads", str(settings.threads),
        "--keep-alive", str(settings.keep_alive),
        "--pythonpath", HERE,
        "--log-level", "warning",
        "harness:create_app()",
    ]  # fmt: skip


def get(port: int, timeout: float = 2.0) -> tuple[int, dict[str, str], bytes]:
    """One ``GET /`` on a new connection: status, headers, body."""
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", "/", headers=HEADERS)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def wait_until_serving(server: Server, timeout: float) -> None:
    """Wait until the server answers ``GET /`` with 200 "ok".

    :raises RuntimeError: if it exits or does not answer in time, quoting its log.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            break
        try:
            status, _headers, body = get(server.port, timeout=1.0)
        except OSError as error:
            last = error
            time.sleep(0.1)
            continue
        if status == 200 and body == b"ok":
            return
        last = f"{status} {body[:200]!r}"
        time.sleep(0.1)
    server.log.seek(0)
    tail = server.log.read()[-2000:].decode("utf-8", "replace")
    raise RuntimeError(f"gunicorn ({server.label}) did not serve within {timeout:.0f} s: {last}\n{tail}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop gunicorn and its workers: TERM to its process group, then KILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def gunicorn(target: Target, redis_url: str, settings: ServerSettings) -> Iterator[Server]:
    """Run one gunicorn, in a process group of its own, for the block.

    :raises RuntimeError: if it does not serve, or its answers lack the target's header.
    """
    port = free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            gunicorn_command(port, settings),
            env={**os.environ, "BENCH_REDIS_URL": redis_url, "BENCH_LIMITER": target.limiter},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            server = Server(target.name, target.label, port, process, log)
            wait_until_serving(server, timeout=30)
            _status, headers, _body = get(port)
            if target.header is not None and target.header not in headers:
                raise RuntimeError(f"gunicorn ({target.label}) answers without a {target.header} header: {headers}")
            yield server
        finally:
            stop(process)


@dataclass
class Load:
    """What one burst of load achieved."""

    ok: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        """Answered requests per second."""
        return self.ok / self.seconds if self.seconds > 0 else 0.0


def client_loop(port: int, budget: int, deadline_holder: list[float], start: threading.Barrier, out: list[Any]) -> None:
    """One load thread: one keep-alive connection, ``budget`` requests at
    most, until the deadline. Appends (ok, errors, latencies) to ``out``."""
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    ok = errors = 0
    latencies: list[float] = []
    try:
        try:
            connection.connect()
        except OSError:
            errors += 1  # and still meet the others at the barrier
        try:
            start.wait(timeout=30)
        except threading.BrokenBarrierError:
            return
        deadline = deadline_holder[0]
        clock = time.perf_counter
        while ok + errors < budget and clock() < deadline:
            sent = clock()
            try:
                connection.request("GET", "/", headers=HEADERS)
                response = connection.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                errors += 1
                connection.close()
                connection = http.client.HTTPConnection(HOST, port, timeout=5)
                continue
            latencies.append((clock() - sent) * 1000)
            if response.status == 200:
                ok += 1
            else:
                errors += 1
    finally:
        connection.close()
        out.append((ok, errors, latencies))


def load(port: int, connections: int, requests: int, seconds: float) -> Load:
    """Send at most ``requests`` requests over ``connections`` keep-alive
    connections, for at most ``seconds``; only ever to 127.0.0.1."""
    deadline_holder = [0.0]
    began = [0.0]

    def release() -> None:  # runs once, in one thread, when all are connected
        began[0] = time.perf_counter()
        deadline_holder[0] = began[0] + seconds

    start = threading.Barrier(connections, action=release)
    out: list[Any] = []
    budget = max(1, requests // connections)
    threads = [
        threading.Thread(target=client_loop, args=(port, budget, deadline_holder, start, out), daemon=True)
        for _ in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    if not began[0]:
        raise RuntimeError(f"the load threads for port {port} never started together")
    elapsed = time.perf_counter() - began[0]
    return Load(
        ok=sum(o for o, _e, _l in out),
        errors=sum(e for _o, e, _l in out),
        seconds=elapsed,
        latencies_ms=[latency for _o, _e, lat in out for latency in lat],
    )


@dataclass(frozen=True)
class LoadSettings:
    """How hard and how long to load each server."""

    rounds: int = 5
    seconds: float = 3.0
    requests: int = 30_000
    connections: int = 8
    warmup_requests: int = 300


def run(redis_url: str, targets: Sequence[Target], server: ServerSettings, loads: LoadSettings) -> list[Server]:
    """Start one gunicorn per target, load them in turn for ``loads.rounds``
    rounds, and stop them all. The first target is the baseline.

    :raises RuntimeError: if a gunicorn cannot be started.
    """
    with ExitStack() as stack:
        servers = [stack.enter_context(gunicorn(target, redis_url, server)) for target in targets]
        for each in servers:  # open connections, load scripts, compile plans
            load(each.port, loads.connections, loads.warmup_requests, loads.seconds)
        for round_number in range(loads.rounds):
            shift = round_number % len(servers)
            for each in servers[shift:] + servers[:shift]:
                result = load(each.port, loads.connections, loads.requests, loads.seconds)
                each.rates.append(result.rate)
                each.latencies_ms.extend(result.latencies_ms)
                each.errors += result.errors
    return servers


def summarize(servers: Sequence[Server]) -> dict[str, dict[str, Any]]:
    """Median requests per second of each server, and its ratio to the first
    (the bare app): the median over rounds of the ratio within each round."""
    base = servers[0]
    results: dict[str, dict[str, Any]] = {}
    for each in servers:
        ratios = [r / b for r, b in zip(each.rates, base.rates, strict=True) if b > 0]
        results[each.name] = {
            "label": each.label,
            "requests_per_second": statistics.median(each.rates),
            "rates": each.rates,
            "vs_no_limiter": statistics.median(ratios) if ratios else None,
            "latency_ms_median": statistics.median(each.latencies_ms) if each.latencies_ms else None,
            "errors": each.errors,
        }
    return results
