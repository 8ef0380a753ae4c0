#!/usr/bin/env python
"""Quota leases (docs/leases.rst) beside the per-request path.

Two parts, each on a throwaway ``redis-server``:

1. **Added time** (in process, interleaved rounds as ``overhead.py`` times
   them): a bare redis-py ``PING`` (the yardstick), the bare app, the app
   with ``@limit(SPEC)`` decided per request, and with ``@limit(SPEC,
   prefetch=True)``: each one's time added to the bare app's, in PINGs,
   and the leased app's script calls per request.
2. **Through gunicorn** (4 ``sync`` workers): one identity sending 1,000
   requests a second, then an app-wide limit (``RATELIMIT_APPLICATION``,
   one identity for every request) at 5,000 a second, each paced by a few
   keep-alive client threads for ``--seconds``, with and without
   ``prefetch``: the rate reached, and Redis's ``EVALSHA`` calls per
   request and per second (from ``INFO commandstats``). On a small shared
   machine 5,000 a second may be out of reach: the rate reached is printed
   beside the calls.
3. **In process** (``--in-process``, 4 forked worker processes, no HTTP
   server): each worker builds the app-wide-limit app and calls its WSGI
   callable on a prebuilt environ (about 100 µs a request here, against
   200 to 440 µs through ``app.test_client()``), paced so that the workers
   together offer 5,000 requests a second for ``--seconds``: the
   decisions a second reached, the admissions, and the script calls that
   reach Redis (``INFO commandstats``, every one of them on the app-wide
   key) a second and per request. Three times with ``prefetch``: under a
   quota far above the demand, under a quota the demand meets
   (``5000/second``), where blocks shrink near each window's end, and
   under half of it (``2500/second``), where half the requests are
   refused; once per request.
   This is the app-wide target (at most 250 calls a second to the key at
   5,000 requests a second) without gunicorn and a load generator in the
   way, which on a small machine cannot reach that rate; it measures
   the limiter and Flask, not a server.

Run it from the repository root::

    python benchmarks/leases.py               # about half a minute
    python benchmarks/leases.py --quick       # a smoke test
    python benchmarks/leases.py --json leases.json
    python benchmarks/leases.py --in-process  # part 3 alone, about 20 seconds
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from e2e import HOST, Server, stop, wait_until_serving
from flask import Flask
from harness import RUN_DEFAULTS, RUN_QUICK, app_variant, base_environ, interleaved, wsgi_runner, yardsticks

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.testing import free_port, redis_server

HERE = os.path.dirname(os.path.abspath(__file__))
#: So large that every request of the benchmark is admitted.
SPEC = "10000000/minute"


def everyone(_request: object) -> str:
    """One identity for every request: the app-wide budget."""
    return "everyone"


def leased_app(url: str, mode: str, spec: str = SPEC) -> Flask:
    """``/``, limited by ``spec`` per request (``plain``), with ``prefetch``
    on the view (``identity``), or by an app-wide limit with ``prefetch``
    (``app``) or without (``app-plain``)."""
    app = Flask(f"leases-{mode}")
    app.config.update(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 5})
    if mode.startswith("app"):
        budget = {"limit": spec, "identities": [everyone], "prefetch": mode == "app"}
        app.config["RATELIMIT_APPLICATION"] = budget
        app.add_url_rule("/", "index", lambda: "ok")
    else:

        @app.get("/")
        @limit(spec, prefetch=mode == "identity")
        def index() -> str:
            return "ok"

    RateLimit(app)
    return app


def create_app() -> Flask:
    """What gunicorn serves: ``BENCH_MODE`` on ``BENCH_REDIS_URL``."""
    return leased_app(os.environ["BENCH_REDIS_URL"], os.environ["BENCH_MODE"])


def added_time(url: str, settings: dict[str, int]) -> dict[str, Any]:
    """Part 1: the time each app adds to the bare one, in PINGs."""
    environ = base_environ()
    plain, leased = leased_app(url, "plain"), leased_app(url, "identity")
    variants = [
        *yardsticks(url, environ),
        app_variant("plain", "@limit(SPEC), per request", plain, environ),
        app_variant("leased", "@limit(SPEC, prefetch=True)", leased, environ),
    ]
    results = interleaved(variants, environ, settings)
    leases = leased.extensions["ratelimit"].leases
    sent = (settings["rounds"] + settings["warmup"]) * settings["batch"] + 1
    results["leased"]["calls_per_request"] = leases.calls / sent
    return results


@contextmanager
def gunicorn(url: str, mode: str, workers: int) -> Iterator[Server]:
    """Run gunicorn serving ``mode`` with ``workers`` sync workers, in a process group of its own."""
    port = free_port()
    command = [
        sys.executable, "-m", "gunicorn",
        "--bind", f"{HOST}:{port}",
        "--workers", str(workers),
        "--worker-class", "sync",
        "--pythonpath", HERE,
        "--log-level", "warning",
        "leases:create_app()",
    ]  # fmt: skip
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command,
            env={**os.environ, "BENCH_REDIS_URL": url, "BENCH_MODE": mode},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            server = Server(mode, mode, port, process, log)
            wait_until_serving(server, timeout=30)
            yield server
        finally:
            stop(process)


def schedule(start: float, rate: float, seconds: float, offset: float) -> Iterator[None]:
    """Yield at each due time of ``rate`` a second from ``start`` (on the
    monotonic clock) for ``seconds``, shifted by ``offset`` of an interval;
    when late, at once."""
    n = 0
    while True:
        due = start + (n + offset) / rate
        if due >= start + seconds:
            return
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        n += 1
        yield


def paced(port: int, rate: float, seconds: float, threads: int) -> dict[str, float]:
    """Send ``rate`` requests a second for ``seconds`` over ``threads``
    connections (a new one per request: sync workers close them), each
    thread on its own schedule; only ever to 127.0.0.1."""
    counts = {"ok": 0, "refused": 0, "errors": 0}
    lock = threading.Lock()
    start = time.monotonic() + 0.2

    def send(offset: int) -> None:
        ok = refused = errors = 0
        for _ in schedule(start, rate / threads, seconds, offset / threads):
            connection = http.client.HTTPConnection(HOST, port, timeout=5)
            try:
                connection.request("GET", "/")
                response = connection.getresponse()
                response.read()
                ok += response.status == 200
                refused += response.status == 429
            except (OSError, http.client.HTTPException):
                errors += 1
            finally:
                connection.close()
        with lock:
            counts["ok"] += ok
            counts["refused"] += refused
            counts["errors"] += errors

    workers = [threading.Thread(target=send, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - start
    return {**counts, "seconds": elapsed, "rate": (counts["ok"] + counts["refused"]) / elapsed}


def evalsha_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0)) + int(stats.get("cmdstat_eval", {}).get("calls", 0))


def through_gunicorn(url: str, seconds: float, workers: int) -> dict[str, Any]:
    """Part 2: calls per request and per second, leased and not, at 1,000 and 5,000 a second."""
    admin = redis.Redis.from_url(url)
    results: dict[str, Any] = {}
    for mode, rate in (("plain", 1000), ("identity", 1000), ("app-plain", 5000), ("app", 5000)):
        admin.flushall()
        with gunicorn(url, mode, workers) as server:
            before = evalsha_calls(admin)
            load = paced(server.port, rate, seconds, threads=16)
            calls = evalsha_calls(admin) - before
        sent = load["ok"] + load["refused"]
        results[mode] = {
            "asked_rate": rate,
            **load,
            "calls_per_request": calls / sent if sent else None,
            "calls_per_second": calls / load["seconds"],
        }
    return results


def in_process_runs(rate: float) -> tuple[tuple[str, str, str], ...]:
    """Part 3's runs at ``rate`` a second: a name, the app's mode and its app-wide limit."""
    return (
        ("leased", "app", SPEC),
        ("leased-at-quota", "app", f"{round(rate)}/second"),
        ("leased-twice", "app", f"{round(rate) // 2}/second"),
        ("per-request", "app-plain", SPEC),
    )


def _drive(url: str, mode: str, spec: str, rate: float, seconds: float, offset: int, workers: int, sync: Any) -> None:
    """One forked worker of part 3: its own app and connections, warmed up
    (its first block taken, the script loaded) before the parent counts;
    then ``rate / workers`` requests a second on its own schedule, shifted
    by ``offset``, late ones sent at once; its counts go on ``sync.results``
    and it waits for ``sync.done`` before exiting, so that the refund its
    exit sends is not counted."""
    app = leased_app(url, mode, spec)
    statuses: Counter[str] = Counter()
    run = wsgi_runner(app, base_environ(), statuses)
    run(1)
    calls_before = app.extensions["ratelimit"].leases.calls
    statuses.clear()
    sync.ready.wait()
    sync.go.wait()
    start = sync.start.value
    sent = 0
    for _ in schedule(start, rate / workers, seconds, offset / workers):
        run(1)
        sent += 1
    finished = time.monotonic()
    calls = app.extensions["ratelimit"].leases.calls - calls_before
    sync.results.put({"sent": sent, "finished": finished, "calls": calls, **statuses})
    sync.done.wait()


class _Sync:
    """What part 3's parent and its workers share."""

    def __init__(self, context: Any, workers: int) -> None:
        self.ready = context.Barrier(workers + 1)
        self.go = context.Event()
        self.done = context.Event()
        self.start = context.Value("d", 0.0)
        self.results = context.Queue()


def in_process(url: str, rate: float, seconds: float, workers: int) -> dict[str, Any]:
    """Part 3: ``workers`` forked processes drive the app-wide limit in process at ``rate`` a second."""
    admin = redis.Redis.from_url(url)
    context = multiprocessing.get_context("fork")
    results: dict[str, Any] = {}
    for name, mode, spec in in_process_runs(rate):
        admin.flushall()
        sync = _Sync(context, workers)
        arguments = (url, mode, spec, rate, seconds)
        processes = [context.Process(target=_drive, args=(*arguments, i, workers, sync)) for i in range(workers)]
        for process in processes:
            process.start()
        sync.ready.wait()
        before = evalsha_calls(admin)
        sync.start.value = time.monotonic() + 0.1
        sync.go.set()
        counts = [sync.results.get(timeout=seconds + 60) for _ in processes]
        calls = evalsha_calls(admin) - before
        sync.done.set()
        for process in processes:
            process.join()
        elapsed = max(count["finished"] for count in counts) - sync.start.value
        sent = sum(count["sent"] for count in counts)
        results[name] = {
            "mode": mode,
            "limit": spec,
            "asked_rate": rate,
            "seconds": elapsed,
            "sent": sent,
            "rate": sent / elapsed,
            "reached": sent / elapsed >= 0.99 * rate,
            "admitted": sum(count.get("200", 0) for count in counts),
            "refused": sum(count.get("429", 0) for count in counts),
            "errors": sent - sum(count.get("200", 0) + count.get("429", 0) for count in counts),
            "calls": calls,
            "workers_calls": sum(count["calls"] for count in counts),
            "calls_per_request": calls / sent if sent else None,
            "calls_per_second": calls / elapsed,
        }
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: short rounds, 2 s of load")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of load per run")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--in-process", action="store_true", help="part 3 alone: forked workers, no HTTP server")
    parser.add_argument("--rate", type=float, default=5000, help="part 3: requests a second, all workers together")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    settings = RUN_QUICK if args.quick else RUN_DEFAULTS
    seconds = 2.0 if args.quick else args.seconds
    with redis_server() as server:
        if args.in_process:
            figures = {"in_process": in_process(server.url, args.rate, seconds, args.workers)}
        else:
            figures = {
                "added_time": added_time(server.url, settings),
                "gunicorn": through_gunicorn(server.url, seconds, args.workers),
            }
    report(figures, args.workers)
    if args.json:
        for entry in figures.get("added_time", {}).values():
            entry.pop("samples_us", None)
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2, default=str)


def report(figures: dict[str, Any], workers: int) -> None:
    """Print what :func:`main` measured."""
    if "added_time" in figures:
        print_added_and_served(figures["added_time"], figures["gunicorn"], workers)
    for name, entry in figures.get("in_process", {}).items():
        if name == "leased":
            print(f"in process, {workers} forked workers, app-wide limit, the WSGI callable (no HTTP server):")
        print(
            f"  {name:<16} {entry['limit']:<16} asked {entry['asked_rate']:>5.0f}/s "
            f"reached {entry['rate']:7.0f}/s ({'yes' if entry['reached'] else 'NO'}) "
            f"admitted {entry['admitted']:>6} refused {entry['refused']:>6} errors {entry['errors']}  "
            f"calls/request {entry['calls_per_request'] or 0:.4f} calls/s {entry['calls_per_second']:7.1f}"
        )


def print_added_and_served(timed: dict[str, Any], served: dict[str, Any], workers: int) -> None:
    print("added time per request, in PINGs (median of paired rounds):")
    for name in ("plain", "leased"):
        entry = timed[name]
        print(f"  {entry['label']:<34} {entry['added_us']:7.1f} us = {entry['added_pings']:.2f} x PING")
    print(f"  leased script calls per request:   {timed['leased']['calls_per_request']:.4f}")
    print(f"through gunicorn, {workers} sync workers:")
    for mode, entry in served.items():
        print(
            f"  {mode:<10} asked {entry['asked_rate']:>5}/s reached {entry['rate']:7.0f}/s "
            f"errors {entry['errors']:>4}  calls/request {entry['calls_per_request'] or 0:.4f} "
            f"calls/s {entry['calls_per_second']:7.1f}"
        )


if __name__ == "__main__":
    main()
