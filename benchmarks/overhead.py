#!/usr/bin/env python
"""How much time a rate limiter adds to a Flask request, against one Redis PING.

One process, one throwaway ``redis-server`` (started on a free loopback port by
:func:`flask_redis_throttle.testing.redis_server`), and these variants, all
measured in the same run:

=============  ===========================================================================
``ping``       one bare redis-py ``PING`` round trip: the yardstick
``bare``       the Flask app with no limiter
``floor``      the Flask app plus one ``PING`` in a ``before_request`` hook: the cheapest
               limiter that asks Redis anything (one round trip, inside a request)
``ours``       flask-redis-throttle: ``@limit(SPEC, identities=["ip", user_key])``
``ours-py``    the same, with Redis's reply canned: only our Python, no round trip
``fl-*``       Flask-Limiter: two ``@limiter.limit(SPEC)`` (remote address, user key),
               ``headers_enabled=True``, once for each of its strategies
=============  ===========================================================================

Every limit has three layers (``N/s;N/m;N/h``) and two identities (the client
IP and an ``X-User`` header read by a key function). The quotas are so large
that every request is admitted: this measures the price of the common case.

The time a limiter *adds* is its time per request minus the bare app's, taken
in the same round; each result is the median over many interleaved rounds
(each round runs every variant once, starting one variant further on than the
round before), so that the noise of a shared machine falls on all variants
alike. The apps are driven through their WSGI callable with a prebuilt environ,
all in the same way, and every Redis client (ours, Flask-Limiter's, the PINGs')
is a redis-py client with the same options and the same reply parser (hiredis
when it is installed).

After the timing, a separate phase counts what each variant sends to Redis:
client side by wrapping redis-py's ``Connection.send_command`` and
``read_response``, server side from ``INFO commandstats`` deltas (which also
count the commands a script runs with ``redis.call``).

Run it from the repository root::

    python benchmarks/overhead.py                  # about a minute
    python benchmarks/overhead.py --quick          # a few seconds: a smoke test
    python benchmarks/overhead.py --rounds 600 --json overhead.json
    python benchmarks/overhead.py --profile 3000   # and cProfile our requests
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import redis
from flask import Flask, Request, request
from werkzeug.test import EnvironBuilder

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.storage import DEFAULT_CLIENT_OPTIONS
from flask_redis_throttle.testing import redis_server

try:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address
except ImportError:  # a message is kinder than a traceback
    sys.exit('Flask-Limiter is not installed; run: pip install -e ".[test,bench]"')

#: Three layers, with quotas no benchmark reaches: every request is admitted.
SPEC = "1000000/s;10000000/m;100000000/h"
#: The same limits in Flask-Limiter's grammar, which has no one-letter units.
FLASK_LIMITER_SPEC = "1000000/second;10000000/minute;100000000/hour"
FLASK_LIMITER_STRATEGIES = ("fixed-window", "moving-window", "sliding-window-counter")
#: The issue's target for the time we add, in PINGs.
TARGET_PINGS = 2.0

CLIENT_IP = "192.0.2.10"
USER = "alice"

DEFAULTS = {"rounds": 300, "batch": 40, "warmup": 5, "count": 200}
QUICK = {"rounds": 10, "batch": 20, "warmup": 2, "count": 50}


def user_key(req: Request) -> str | None:
    """Our key function: the user named by the ``X-User`` header."""
    return req.headers.get("X-User")


def flask_limiter_user_key() -> str:
    """The same for Flask-Limiter, whose key functions read the request themselves."""
    return request.headers.get("X-User", "")


def client_options() -> dict[str, Any]:
    """The redis-py options of every client here: those our storage uses."""
    return dict(DEFAULT_CLIENT_OPTIONS)


# --- the variants ---------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    label: str
    #: Runs the variant n times.
    run: Callable[[int], None]
    #: The app, to check its answer; None for the bare PING.
    app: Flask | None = None
    #: The redis-py client it talks through, to name its reply parser.
    client: redis.Redis | None = None
    #: A SCAN pattern matching its keys in Redis, to count its counters.
    key_pattern: str | None = None
    #: The header its answers must carry.
    header: str | None = None
    #: One time per round: the mean of one call over the round's batch, in microseconds.
    samples: list[float] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)


def make_view() -> Callable[[], str]:
    """A new view function for each app: the decorators mark the function they get."""

    def view() -> str:
        return "ok"

    return view


def bare_app() -> Flask:
    app = Flask("bare")
    app.add_url_rule("/", "index", make_view())
    return app


def floor_app(client: redis.Redis) -> Flask:
    app = bare_app()

    def one_round_trip() -> None:
        client.ping()

    app.before_request(one_round_trip)
    return app


def our_app(url: str, prefix: str) -> Flask:
    app = Flask("ours")
    app.config["RATELIMIT_STORAGE_URL"] = url
    # Our defaults, spelled out: both libraries visibly get the same client options.
    app.config["RATELIMIT_STORAGE_OPTIONS"] = client_options()
    app.config["RATELIMIT_HEADERS_ENABLED"] = True
    app.config["RATELIMIT_KEY_PREFIX"] = prefix
    RateLimit(app)
    app.add_url_rule("/", "index", limit(SPEC, identities=["ip", user_key])(make_view()))
    return app


def our_storage(app: Flask) -> Any:
    state = app.extensions.get("ratelimit")
    return getattr(getattr(state, "throttle", None), "storage", None)


def our_client(app: Flask) -> redis.Redis | None:
    return getattr(our_storage(app), "client", None)


def can_replies(app: Flask) -> bool:
    """Make the app's storage answer every script call with the first real reply
    it got, so that the app runs all of our Python but never waits for Redis.
    False if the package's internals have moved and this no longer applies."""
    storage = our_storage(app)
    evaluate = getattr(storage, "evaluate", None)
    if evaluate is None:
        return False
    replies: dict[Any, Any] = {}

    def canned(strategy: str, *args: Any, **kwargs: Any) -> Any:
        if strategy not in replies:
            replies[strategy] = evaluate(strategy, *args, **kwargs)
        return replies[strategy]

    storage.evaluate = canned
    return True


def flask_limiter_app(url: str, strategy: str) -> tuple[Flask, Limiter]:
    app = Flask(f"fl-{strategy}")
    limiter = Limiter(
        get_remote_address,
        app=app,
        storage_uri=url,
        storage_options=client_options(),
        strategy=strategy,
        headers_enabled=True,
        # The strategies keep different kinds of keys: separate prefixes keep them apart.
        key_prefix=f"fl-{strategy}",
    )
    limited = limiter.limit(FLASK_LIMITER_SPEC, key_func=get_remote_address)(make_view())
    limited = limiter.limit(FLASK_LIMITER_SPEC, key_func=flask_limiter_user_key)(limited)
    app.add_url_rule("/", "index", limited)
    return app, limiter


def base_environ() -> dict[str, Any]:
    """``GET /`` from CLIENT_IP with ``X-User: USER``, built once."""
    builder = EnvironBuilder(path="/", headers={"X-User": USER}, environ_base={"REMOTE_ADDR": CLIENT_IP})
    try:
        return builder.get_environ()
    finally:
        builder.close()


def wsgi_runner(app: Flask, environ: dict[str, Any]) -> Callable[[int], None]:
    """Call the WSGI app n times, each on a fresh copy of the prebuilt environ."""

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        return None

    def run(n: int) -> None:
        for _ in range(n):
            body = app(dict(environ), start_response)
            for _chunk in body:
                pass
            close = getattr(body, "close", None)
            if close is not None:
                close()

    return run


def ping_runner(client: redis.Redis) -> Callable[[int], None]:
    def run(n: int) -> None:
        ping = client.ping
        for _ in range(n):
            ping()

    return run


def probe(app: Flask, environ: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    """One request: its status, headers and body."""
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer["status"], answer["headers"] = status, dict(headers)

    body = app(dict(environ), start_response)
    try:
        data = b"".join(body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return answer["status"], answer["headers"], data


def check(variant: Variant, environ: dict[str, Any]) -> None:
    """Stop unless the variant answers 200 "ok", with its rate limit header."""
    if variant.app is None:
        return
    status, headers, body = probe(variant.app, environ)
    if not status.startswith("200") or body != b"ok":
        sys.exit(f"{variant.label}: expected 200 'ok', got {status} {body[:300]!r}")
    if variant.header is not None and variant.header not in headers:
        sys.exit(f"{variant.label}: no {variant.header} header in {headers}")


def build_variants(url: str, environ: dict[str, Any], strategies: tuple[str, ...]) -> list[Variant]:
    ping_client = redis.Redis.from_url(url, **client_options())
    variants = [Variant("ping", "PING (bare redis-py round trip)", ping_runner(ping_client), client=ping_client)]

    app = bare_app()
    variants.append(Variant("bare", "Flask app, no limiter", wsgi_runner(app, environ), app=app))

    floor_client = redis.Redis.from_url(url, **client_options())
    app = floor_app(floor_client)
    variants.append(
        Variant("floor", "Flask app + 1 PING/request", wsgi_runner(app, environ), app=app, client=floor_client)
    )

    for name, label, prefix in (
        ("ours", "flask-redis-throttle", "rl:"),
        ("ours-py", "  same, Redis reply canned", "rl-canned:"),
    ):
        app = our_app(url, prefix)
        if name == "ours-py" and not can_replies(app):
            print("note: cannot can our storage's replies (internals moved); skipping ours-py", file=sys.stderr)
            continue
        variants.append(
            Variant(
                name,
                label,
                wsgi_runner(app, environ),
                app=app,
                client=our_client(app),
                # The canned variant's keys are those of its one real call.
                key_pattern=f"{prefix}*" if name == "ours" else None,
                header="RateLimit",
            )
        )

    for strategy in strategies:
        app, limiter = flask_limiter_app(url, strategy)
        storage = limiter.storage  # limits' RedisStorage; its .storage is the redis-py client
        variants.append(
            Variant(
                f"fl-{strategy}",
                f"Flask-Limiter {strategy}",
                wsgi_runner(app, environ),
                app=app,
                client=getattr(storage, "storage", None),
                key_pattern=f"*/fl-{strategy}/*",
                header="X-RateLimit-Remaining",
            )
        )
    return variants


# --- measuring ------------------------------------------------------------------------------------


def measure(variants: list[Variant], rounds: int, batch: int, warmup_rounds: int) -> None:
    """Interleave the variants, round after round, rotating the order; keep one
    sample per variant and round: the mean time of one call over the batch."""
    gc.collect()
    for round_number in range(warmup_rounds + rounds):
        shift = round_number % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            run = variant.run
            start = time.perf_counter_ns()
            run(batch)
            elapsed = time.perf_counter_ns() - start
            if round_number >= warmup_rounds:
                variant.samples.append(elapsed / batch / 1000)


def single_pings(client: redis.Redis, n: int) -> float:
    """The median of n PINGs timed one by one, in microseconds."""
    times = []
    for _ in range(n):
        start = time.perf_counter_ns()
        client.ping()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


@contextmanager
def counting_commands() -> Iterator[Counter[str]]:
    """Count every command redis-py sends, by name, and the replies it reads
    (under ``#replies``), while the block runs."""
    counter: Counter[str] = Counter()
    cls = redis.connection.Connection
    saved = {name: cls.__dict__.get(name) for name in ("send_command", "read_response")}
    send_command, read_response = cls.send_command, cls.read_response

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = args[0]
        counter[(name.decode() if isinstance(name, bytes) else str(name)).upper()] += 1
        return send_command(self, *args, **kwargs)

    def counted_read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter["#replies"] += 1
        return read_response(self, *args, **kwargs)

    cls.send_command = counted_send_command  # type: ignore[method-assign]
    cls.read_response = counted_read_response  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        for name, method in saved.items():
            if method is None:
                delattr(cls, name)
            else:
                setattr(cls, name, method)


def command_stats(admin: redis.Redis) -> dict[str, tuple[int, int]]:
    """``INFO commandstats``: calls and microseconds spent, by command."""
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["calls"]), int(s["usec"])) for name, s in stats.items()}


def count(variant: Variant, admin: redis.Redis, requests: int) -> None:
    """What the variant sends per request, and what Redis runs for it."""
    before = command_stats(admin)
    with counting_commands() as sent:
        variant.run(requests)
    after = command_stats(admin)
    delta = {
        name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
        for name, (calls, usec) in after.items()
        if name != "info"
    }
    server = {name: calls / requests for name, (calls, _usec) in delta.items() if calls}
    client = {name: calls / requests for name, calls in sent.items() if not name.startswith("#")}
    scripts = [delta.get(name, (0, 0)) for name in ("evalsha", "evalsha_ro", "eval", "eval_ro")]
    script_calls, script_usec = sum(c for c, _ in scripts), sum(u for _, u in scripts)
    keys = None
    if variant.key_pattern is not None:
        keys = sum(1 for _ in admin.scan_iter(match=variant.key_pattern, count=1000))
    variant.counts = {
        "client_commands": sum(client.values()),
        "client_by_command": dict(sorted(client.items())),
        "round_trips": sent["#replies"] / requests,
        "server_evalsha": server.get("evalsha", 0) + server.get("evalsha_ro", 0),
        "server_commands": sum(server.values()),
        "server_by_command": dict(sorted(server.items(), key=lambda item: (-item[1], item[0]))),
        "server_us_per_script": script_usec / script_calls if script_calls else None,
        "keys": keys,
    }


def profile(variant: Variant, requests: int, top: int = 30) -> str:
    """cProfile ``requests`` calls of the variant: where the time goes."""
    profiler = cProfile.Profile()
    profiler.enable()
    variant.run(requests)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats("flask_redis_throttle", top)
    return out.getvalue()


# --- reporting ------------------------------------------------------------------------------------


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _median, q3 = statistics.quantiles(values, n=4)
    return q1, q3


def summarize(variants: list[Variant]) -> dict[str, dict[str, Any]]:
    by_name = {v.name: v for v in variants}
    ping = statistics.median(by_name["ping"].samples)
    bare = by_name["bare"].samples
    results: dict[str, dict[str, Any]] = {}
    for variant in variants:
        entry: dict[str, Any] = {
            "label": variant.label.strip(),
            "per_call_us": statistics.median(variant.samples),
            "per_call_us_quartiles": quartiles(variant.samples),
        }
        if variant.name not in ("ping", "bare"):
            # Paired by round: the two ran within a few milliseconds of each other.
            added = [s - b for s, b in zip(variant.samples, bare, strict=True)]
            entry["added_us"] = statistics.median(added)
            entry["added_us_quartiles"] = quartiles(added)
            entry["added_pings"] = entry["added_us"] / ping
        entry.update(variant.counts)
        results[variant.name] = entry
    ours = results["ours"]
    ours["target_pings"] = TARGET_PINGS
    ours["meets_target"] = ours["added_pings"] <= TARGET_PINGS
    ours["added_floors"] = ours["added_us"] / results["floor"]["added_us"]
    for name, entry in results.items():
        if name.startswith("fl-"):
            entry["vs_ours"] = entry["added_us"] / ours["added_us"] if ours["added_us"] > 0 else None
    return results


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_count(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value - round(value)) < 0.005:
        return str(round(value))
    return f"{value:.2f}"


def table(results: dict[str, dict[str, Any]], labels: dict[str, str]) -> str:
    headers = (
        "variant",
        "us/call",
        "added us",
        "IQR",
        "added/PING",
        "target",
        "vs ours",
        "cmds sent",
        "round trips",
        "srv EVALSHA",
        "srv cmds",
        "srv us/script",
        "keys",
    )
    rows = []
    for name, r in results.items():
        iqr = r.get("added_us_quartiles")
        multiple = "1.00x" if name == "ping" else (f"{r['added_pings']:.2f}x" if "added_pings" in r else "-")
        target = f"<={TARGET_PINGS:g}x " + ("met" if r["meets_target"] else "MISSED") if name == "ours" else ""
        rows.append(
            (
                labels[name],
                fmt(r["per_call_us"]),
                fmt(r.get("added_us")),
                f"{iqr[0]:.0f}..{iqr[1]:.0f}" if iqr else "",
                multiple,
                target,
                f"{r['vs_ours']:.1f}x" if r.get("vs_ours") else "",
                fmt_count(r.get("client_commands")),
                fmt_count(r.get("round_trips")),
                fmt_count(r.get("server_evalsha")),
                fmt_count(r.get("server_commands")),
                fmt(r.get("server_us_per_script")),
                fmt_count(r.get("keys")),
            )
        )
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in (headers, *rows)
    ]
    lines.insert(1, "-" * max(map(len, lines)))
    return "\n".join(lines)


LEGEND = """\
us/call: median over rounds of the mean time of one call. added us: median over rounds of (this app - the
bare app, in the same round); IQR: its interquartile range. added/PING: added us / PING us/call. vs ours:
Flask-Limiter's added us / ours. cmds sent: commands redis-py sent per request; round trips: replies it read
per request. srv EVALSHA, srv cmds: per request, from INFO commandstats deltas, which also count the commands
that scripts run (GET, SET, TIME...). srv us/script: Redis's own time per script call. keys: the variant's
counters in Redis after the run."""


def breakdown(results: dict[str, dict[str, Any]]) -> str:
    lines = []
    for r in results.values():
        if not r.get("server_by_command"):
            continue
        sent = ", ".join(f"{k} {fmt_count(v)}" for k, v in r["client_by_command"].items())
        ran = ", ".join(f"{k} {fmt_count(v)}" for k, v in r["server_by_command"].items())
        lines.append(f"  {r['label']}\n    sent: {sent}\n    ran:  {ran}")
    return "\n".join(lines)


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def parser_name(client: redis.Redis) -> str:
    """The reply parser of the client's pooled connections."""
    pool = client.connection_pool
    try:
        connection = pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        connection = pool.get_connection("PING")
    try:
        return type(connection._parser).__name__
    finally:
        pool.release(connection)


def reproduce_command(args: argparse.Namespace) -> str:
    command = ["python", "benchmarks/overhead.py"]
    for option in ("rounds", "batch", "warmup", "count"):
        command += [f"--{option}", str(getattr(args, option))]
    if args.strategies != FLASK_LIMITER_STRATEGIES:
        command += ["--strategies", ",".join(args.strategies)]
    return shlex.join(command)


# --- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The time a rate limiter adds to a Flask request, in microseconds and in Redis PINGs.",
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: few, short rounds (a smoke test)")
    for option, help_text in (
        ("rounds", "measured rounds"),
        ("batch", "calls of each variant per round"),
        ("warmup", "unmeasured rounds first"),
        ("count", "requests of each variant in the command-counting phase"),
    ):
        parser.add_argument(
            f"--{option}",
            type=int,
            help=f"{help_text} (default {DEFAULTS[option]}; {QUICK[option]} with --quick)",
        )
    parser.add_argument(
        "--strategies",
        default=",".join(FLASK_LIMITER_STRATEGIES),
        help="the Flask-Limiter strategies to compare, comma separated (default: all three)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results, as JSON, to PATH")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="at the end, cProfile N of our requests and print where the time goes",
    )
    args = parser.parse_args(argv)
    for option, default in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, option) is None:
            setattr(args, option, default)
    args.strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    unknown = sorted(set(args.strategies) - set(FLASK_LIMITER_STRATEGIES))
    if unknown:
        parser.error(f"unknown strategies {unknown}; choose from {', '.join(FLASK_LIMITER_STRATEGIES)}")
    if min(args.rounds, args.batch, args.count) < 1 or args.warmup < 0 or args.profile < 0:
        parser.error("--rounds, --batch and --count must be at least 1; --warmup and --profile at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    environ = base_environ()
    with redis_server() as server:
        admin = redis.Redis.from_url(server.url, **client_options())
        server_version = admin.info("server")["redis_version"]
        variants = build_variants(server.url, environ, args.strategies)
        for variant in variants:
            # The first calls open connections, load each script (EVALSHA, NOSCRIPT,
            # SCRIPT LOAD, EVALSHA) and compile the apps' per-endpoint plans.
            variant.run(5)
            check(variant, environ)
            variant.run(max(args.batch, 50))
        parsers = {v.name: parser_name(v.client) for v in variants if v.client is not None}
        print(
            f"redis-server {server_version} on 127.0.0.1:{server.port}; {len(variants)} variants x "
            f"{args.rounds} rounds x {args.batch} calls, interleaved (+{args.warmup} warm-up rounds)...",
            file=sys.stderr,
        )
        measure(variants, args.rounds, args.batch, args.warmup)
        ping_single = single_pings(variants[0].client, max(1000, args.rounds * 10))  # type: ignore[arg-type]
        for variant in variants:
            count(variant, admin, args.count)
        results = summarize(variants)
        profiled = None
        if args.profile:
            profiled = profile(next(v for v in variants if v.name == "ours"), args.profile)
    elapsed = time.monotonic() - started

    parser_names = sorted(set(parsers.values()))
    hiredis = version("hiredis")
    environment = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "redis_server": server_version,
        "redis_py": redis.__version__,
        "hiredis": hiredis,
        "reply_parsers": parsers,
        "flask": version("flask"),
        "werkzeug": version("werkzeug"),
        "flask_redis_throttle": version("flask-redis-throttle"),
        "flask_limiter": version("flask-limiter"),
        "limits": version("limits"),
    }
    settings = {
        "rounds": args.rounds,
        "batch": args.batch,
        "warmup_rounds": args.warmup,
        "count_requests": args.count,
        "spec": SPEC,
        "flask_limiter_spec": FLASK_LIMITER_SPEC,
        "identities": ["ip (REMOTE_ADDR)", "user (X-User header, through a key function)"],
        "strategies": list(args.strategies),
        "seconds": round(elapsed, 1),
    }
    command = reproduce_command(args)
    ping = results["ping"]["per_call_us"]
    ours = results["ours"]
    floor = results["floor"]

    print()
    print(
        f"Time added per admitted request: 3 layers ({SPEC}) x 2 identities (IP, X-User key function).\n"
        f"Medians of {args.rounds} interleaved rounds of {args.batch} calls per variant; {elapsed:.0f} s in all.\n"
        f"{environment['python']}, Flask {environment['flask']}, Flask-Limiter {environment['flask_limiter']} "
        f"(limits {environment['limits']}), redis-server {server_version} on loopback, {os.cpu_count()} CPUs.\n"
        f"Every client is redis-py {redis.__version__} with the same options and the "
        + (f"{parser_names[0]} reply parser" if len(parser_names) == 1 else f"reply parsers {parsers}")
        + (f" (hiredis {hiredis})." if hiredis != "not installed" else " (hiredis is not installed).")
    )
    print()
    labels = {v.name: v.label for v in variants}
    print(table(results, labels))
    print()
    print(LEGEND)
    print()
    print("Commands per request, by name, as sent by redis-py and as run by Redis:")
    print(breakdown(results))
    print()
    verdict = "met" if ours["meets_target"] else "MISSED"
    print(
        f"flask-redis-throttle adds {ours['added_us']:.1f} us per request = {ours['added_pings']:.2f} x PING "
        f"({ping:.1f} us); target <= {TARGET_PINGS:g} x PING: {verdict}."
    )
    print(
        f"One round trip made from inside a request (floor) adds {floor['added_us']:.1f} us "
        f"= {floor['added_pings']:.2f} x PING; ours is {ours['added_floors']:.2f} x that floor."
    )
    if "ours-py" in results:
        python_us = results["ours-py"]["added_us"]
        print(
            f"Of ours, {python_us:.1f} us is our Python with Redis's reply canned; "
            f"Redis runs our script in {fmt(ours['server_us_per_script'])} us of its own time per call."
        )
    print(f"A PING timed alone: median {ping_single:.1f} us (the table's PING is the mean over a batch).")
    for name, entry in results.items():
        if name.startswith("fl-"):
            vs = f"{entry['vs_ours']:.1f} x ours" if entry.get("vs_ours") else "ours adds nothing"
            print(
                f"{entry['label']} adds {entry['added_us']:.1f} us = {entry['added_pings']:.2f} x PING ({vs}), "
                f"in {fmt_count(entry['round_trips'])} round trips."
            )
    print()
    print(f"Reproduce: {command}")
    if profiled is not None:
        print()
        print(f"cProfile of {args.profile} flask-redis-throttle requests:")
        print(profiled)
    if args.json:
        document = {
            "command": command,
            "environment": environment,
            "settings": settings,
            "ping_single_median_us": ping_single,
            "results": results,
            "samples_us": {v.name: v.samples for v in variants},
        }
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
