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

Run it from the repository root::

    python benchmarks/leases.py               # about half a minute
    python benchmarks/leases.py --quick       # a smoke test
    python benchmarks/leases.py --json leases.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from e2e import HOST, Server, stop, wait_until_serving
from flask import Flask
from harness import RUN_DEFAULTS, RUN_QUICK, app_variant, base_environ, interleaved, yardsticks

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.testing import free_port, redis_server

HERE = os.path.dirname(os.path.abspath(__file__))
#: So large that every request of the benchmark is admitted.
SPEC = "10000000/minute"


def everyone(_request: object) -> str:
    """One identity for every request: the app-wide budget."""
    return "everyone"


def leased_app(url: str, mode: str) -> Flask:
    """``/``, limited per request (``plain``), with ``prefetch`` on the view
    (``identity``), or by an app-wide limit with ``prefetch`` (``app``) or
    without (``app-plain``)."""
    app = Flask(f"leases-{mode}")
    app.config.update(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 5})
    if mode.startswith("app"):
        budget = {"limit": SPEC, "identities": [everyone], "prefetch": mode == "app"}
        app.config["RATELIMIT_APPLICATION"] = budget
        app.add_url_rule("/", "index", lambda: "ok")
    else:

        @app.get("/")
        @limit(SPEC, prefetch=mode == "identity")
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


def paced(port: int, rate: float, seconds: float, threads: int) -> dict[str, float]:
    """Send ``rate`` requests a second for ``seconds`` over ``threads``
    connections (a new one per request: sync workers close them), each
    thread on its own schedule; only ever to 127.0.0.1."""
    counts = {"ok": 0, "refused": 0, "errors": 0}
    lock = threading.Lock()
    start = time.monotonic() + 0.2

    def send(offset: int) -> None:
        each = rate / threads
        n = 0
        ok = refused = errors = 0
        while True:
            due = start + (n + offset / threads) / each
            if due >= start + seconds:
                break
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            n += 1
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: short rounds, 2 s of load")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of load per gunicorn run")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    settings = RUN_QUICK if args.quick else RUN_DEFAULTS
    with redis_server() as server:
        timed = added_time(server.url, settings)
        served = through_gunicorn(server.url, 2.0 if args.quick else args.seconds, args.workers)
    print("added time per request, in PINGs (median of paired rounds):")
    for name in ("plain", "leased"):
        entry = timed[name]
        print(f"  {entry['label']:<34} {entry['added_us']:7.1f} us = {entry['added_pings']:.2f} x PING")
    print(f"  leased script calls per request:   {timed['leased']['calls_per_request']:.4f}")
    print(f"through gunicorn, {args.workers} sync workers:")
    for mode, entry in served.items():
        print(
            f"  {mode:<10} asked {entry['asked_rate']:>5}/s reached {entry['rate']:7.0f}/s "
            f"errors {entry['errors']:>4}  calls/request {entry['calls_per_request'] or 0:.4f} "
            f"calls/s {entry['calls_per_second']:7.1f}"
        )
    if args.json:
        for entry in timed.values():
            entry.pop("samples_us", None)
        with open(args.json, "w") as out:
            json.dump({"added_time": timed, "gunicorn": served}, out, indent=2, default=str)


if __name__ == "__main__":
    main()
