#!/usr/bin/env python
"""One command, one report: what a rate limiter costs, ours beside Flask-Limiter's.

Everything runs against one throwaway ``redis-server`` on a free loopback port
(:func:`flask_redis_throttle.testing.redis_server`), never a Redis you run.
The apps, the timing and the counting are those of ``overhead.py``, shared in
``harness.py``. Sections, all in one table:

1-3. **Admitted requests**, three layers (``N/s;N/m;N/h``) on two identities
     (the client IP and an ``X-User`` key function): the time each limiter
     adds to a Flask request (in microseconds and in PINGs measured in the same
     rounds), the commands it sends, and Redis's own time for them, for each
     of our four strategies and each of Flask-Limiter's three.
4.   **How the cost grows**: ours with 1, 3 and 6 layers on 1 and 2
     identities, 6 layers on 3; and 10,000 distinct clients in turn against
     one hot client.
5.   **Flood**: one client over its limit (``1/m``) keeps asking: Redis
     commands and time per refused request, with the block cache
     (``RATELIMIT_BLOCK_CACHE_SIZE``) at its default and off.
6.   **Memory**: Redis memory per client, ours and Flask-Limiter's fixed window
     (``memory.py``'s bulk pattern).
7.   **End to end**: gunicorn serving the app with no limiter, with ours and
     with Flask-Limiter, loaded over keep-alive connections: requests per second.
8.   **local://**: ours on ``local://`` (a server the app starts on demand,
     on a Unix socket) beside ours on ``redis://`` on loopback, the same
     server binary for both, in the same rounds.
9.   **Redis Cluster**: a throwaway 3-master cluster beside the single node,
     3 layers x 2 identities whose counters live on 2 different masters: ours
     on the cluster, ours on the single node and Flask-Limiter on the same
     cluster, interleaved; and Redis's time per decision (``INFO
     commandstats`` usec of EVALSHA and EVAL, summed over every master), on
     the cluster and on the single node.
10.  **memory://**: the same admitted requests with no Redis at all, ours on
     the embedded store beside Flask-Limiter's pure-Python ``memory://``.

Times in sections 1, 4, 5, 8, 9 and 10 come from interleaved rounds (every variant runs
a batch each round, the order rotating), paired by round with the bare app:
the medians of (variant - bare app). Commands are counted in a separate,
untimed phase, client side (redis-py's ``Connection``) and server side
(``INFO commandstats`` deltas).

Run it from the repository root::

    python benchmarks/suite.py                    # a few minutes
    python benchmarks/suite.py --quick            # under a minute: for CI
    python benchmarks/suite.py --json suite.json --plot docs/_static/performance.png

Every target is checked against the run and printed MET or MISSED; the
targets are :data:`harness.TARGETS`, the one place their bounds are written.
``report.py`` renders the README's and the docs' figures from ``--json``'s
output (``benchmarks/results/suite.json``, written with ``--no-samples``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import e2e
import memory as memory_bench
import redis
from flask import Flask
from harness import (
    CLIENT_IP,
    FLASK_LIMITER_STRATEGIES,
    OUR_STRATEGIES,
    SPEC,
    TARGETS,
    Environ,
    Target,
    Variant,
    bare_app,
    base_environ,
    check,
    client_options,
    command_stats,
    count,
    counting_commands,
    describe,
    environment,
    flask_limiter_app,
    flask_limiter_variant,
    floor_app,
    fmt,
    fmt_count,
    measure,
    our_app,
    our_client,
    paired_added,
    parser_name,
    render_table,
    user_key,
    warm_up,
    wsgi_runner,
    yardsticks,
)
from werkzeug.exceptions import TooManyRequests

from flask_redis_throttle import Identity
from flask_redis_throttle import _config as our_config
from flask_redis_throttle.core import local
from flask_redis_throttle.core.keys import identity_tag
from flask_redis_throttle.core.rates import parse_limits
from flask_redis_throttle.core.throttle import Policy
from flask_redis_throttle.testing import find_redis_server, redis_cluster, redis_server

SECTIONS = ("admitted", "growth", "flood", "memory", "e2e", "local", "cluster", "embedded")


def tenant_key(req: Any) -> str:
    """A third identity for section 4's 6 x 3 row: the ``X-Tenant`` header, or ``default``."""
    return str(req.headers.get("X-Tenant", "default"))


#: Flask-Limiter's strategies, each beside the one of ours that does the same job.
LIKE_FOR_LIKE = {
    "fixed-window": "fixed-window",
    "moving-window": "sliding-log",
    "sliding-window-counter": "sliding-window",
}
#: Layers for section 4, by number: quotas no run reaches.
LAYER_SPECS = {
    1: "1000000/s",
    3: SPEC,
    6: "1000000/s;5000000/10s;10000000/m;50000000/10m;100000000/h;1000000000/d",
}
IDENTITY_SETS: dict[int, tuple[Any, ...]] = {1: ("ip",), 2: ("ip", user_key), 3: ("ip", user_key, tenant_key)}
GROWTH_STRATEGIES = ("fixed-window", "gcra")
#: Section 4's (layers, identities): every pairing of 1, 3, 6 layers with 1, 2 identities, and 6 x 3.
GROWTH_SHAPES = ((1, 1), (1, 2), (3, 1), (3, 2), (6, 1), (6, 2), (6, 3))

#: Section 5: the limit the flooding client is over.
FLOOD_SPEC = "1/m"
FLASK_LIMITER_FLOOD_SPEC = "1/minute"
CACHE_SETTING = "RATELIMIT_BLOCK_CACHE_SIZE"


@dataclass(frozen=True)
class Settings:
    """How long each section runs."""

    rounds: int = 200
    batch: int = 30
    warmup: int = 5
    count: int = 1000
    growth_rounds: int = 100
    growth_batch: int = 20
    identities: int = 10_000
    flood_rounds: int = 40
    flood_batch: int = 50
    memory_identities: int = 1000
    memory_repeat: int = 3
    e2e_rounds: int = 5
    e2e_seconds: float = 3.0
    e2e_connections: int = 8
    workers: int = 2
    threads: int = 4

    @property
    def flood_requests(self) -> int:
        """Refused requests timed, and counted, in section 5."""
        return self.flood_rounds * self.flood_batch


FULL = Settings()
QUICK = Settings(
    rounds=12,
    batch=20,
    warmup=2,
    count=60,
    growth_rounds=8,
    growth_batch=10,
    flood_rounds=10,
    flood_batch=50,
    memory_identities=200,
    memory_repeat=1,
    e2e_rounds=2,
    e2e_seconds=1.5,
)


# --- shared steps ---------------------------------------------------------------------------------


def our_variant(
    name: str,
    label: str,
    app: Flask,
    environs: Environ | Sequence[Environ],
    statuses: Counter[str] | None = None,
    **extra: Any,
) -> Variant:
    """A variant for one of our apps; ``extra`` goes to :class:`Variant`."""
    return Variant(name, label, wsgi_runner(app, environs, statuses), app=app, **extra)


def time_and_count(
    variants: Sequence[Variant],
    admin: redis.Redis,
    rounds: int,
    batch: int,
    warmup: int,
    requests: int,
    statuses: Mapping[str, Counter[str]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Time the variants interleaved, then count each one's commands; return
    each one's figures: per call, added to the bare app, in PINGs."""
    measure(variants, rounds, batch, warmup)
    for variant in variants:
        count(variant, admin, requests, (statuses or {}).get(variant.name))
    return figures(variants)


def figures(variants: Sequence[Variant]) -> dict[str, dict[str, Any]]:
    """Each timed variant's figures, by name: per call; added to the
    ``bare`` variant's time, paired by round; in PINGs when there is a
    ``ping`` variant; and its counts."""
    by_name = {v.name: v for v in variants}
    ping = statistics.median(by_name["ping"].samples) if "ping" in by_name else None
    bare = by_name["bare"].samples
    results: dict[str, dict[str, Any]] = {}
    for variant in variants:
        entry: dict[str, Any] = {"label": variant.label, "per_call_us": statistics.median(variant.samples)}
        if variant.name == "ping":
            entry["added_pings"] = 1.0
        elif variant.name != "bare":
            entry.update(paired_added(variant.samples, bare))
            if ping is not None:
                entry["added_pings"] = entry["added_us"] / ping
        entry.update(variant.counts)
        entry["samples_us"] = variant.samples
        results[variant.name] = entry
    return results


def plural(n: int, noun: str) -> str:
    """``1 layer``, ``3 layers``; ``2 identities``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1]}ies" if noun.endswith("y") else f"{n} {noun}s"


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is not positive."""
    return a / b if a is not None and b is not None and b > 0 else None


# --- sections 1 to 3: admitted requests -----------------------------------------------------------


def admitted(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours (four strategies) and Flask-Limiter's (three) on admitted requests."""
    environ = base_environ()
    variants = yardsticks(url, environ)
    floor_client = redis.Redis.from_url(url, **client_options())
    app = floor_app(floor_client)
    variants.append(Variant("floor", "Flask app + 1 PING/request (floor)", wsgi_runner(app, environ), app=app))
    for strategy in OUR_STRATEGIES:
        app = our_app(url, f"rl-{strategy}:", strategy=strategy)
        variants.append(
            our_variant(
                f"ours-{strategy}",
                f"ours {strategy}",
                app,
                environ,
                client=our_client(app),
                key_pattern=f"rl-{strategy}:*",
                header="RateLimit",
            )
        )
    variants += [flask_limiter_variant(url, environ, strategy) for strategy in FLASK_LIMITER_STRATEGIES]
    warm_up(variants, 5)
    for variant in variants:
        check(variant, environ)
    warm_up(variants, max(s.batch, 50))
    parsers = {v.name: parser_name(v.client) for v in variants if v.client is not None}
    results = time_and_count(variants, admin, s.rounds, s.batch, s.warmup, s.count)
    for strategy in FLASK_LIMITER_STRATEGIES:
        entry = results[f"fl-{strategy}"]
        ours = results[f"ours-{LIKE_FOR_LIKE[strategy]}"]
        entry["ours"] = f"ours-{LIKE_FOR_LIKE[strategy]}"
        entry["vs_ours"] = ratio(entry["added_us"], ours["added_us"])
        entry["vs_ours_range"] = [
            ratio(entry["added_us"], max(results[f"ours-{o}"]["added_us"] for o in OUR_STRATEGIES)),
            ratio(entry["added_us"], min(results[f"ours-{o}"]["added_us"] for o in OUR_STRATEGIES)),
        ]
    return {"results": results, "parsers": parsers}


def admitted_rows(section: Mapping[str, Any]) -> list[list[str]]:
    results = section["results"]
    ping = results["ping"]["per_call_us"]
    title = f"1-3. Admitted, 3 layers x 2 identities ({SPEC}); ratio = Flask-Limiter / ours, like for like"
    rows: list[list[str]] = [[title]]
    for name, r in results.items():
        if name == "bare":
            continue
        target = ""
        if name in TARGETS:
            target = target_cell(TARGETS[name], r["added_pings"])
        elif name.startswith("fl-"):
            target = target_cell(TARGETS["flask-limiter-ratio"], r["vs_ours"] or 0.0)
        vs = f"{r['vs_ours']:.1f}x" if r.get("vs_ours") else ""
        rows.append(
            [
                "  " + r["label"],
                fmt(ping if name == "ping" else r["added_us"]),
                f"{r['added_pings']:.2f}x",
                vs,
                fmt_count(r.get("client_commands")),
                fmt_count(r.get("server_commands")),
                fmt(r.get("server_us_per_request")),
                "",
                target,
            ]
        )
    return rows


# --- section 4: how the cost grows ----------------------------------------------------------------


def distinct_environs(base: Environ, n: int) -> list[Environ]:
    """n requests from n distinct clients: each its own address and user."""
    return [
        {**base, "REMOTE_ADDR": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", "HTTP_X_USER": f"user{i}"}
        for i in range(n)
    ]


def digest_cache_size() -> int:
    """How many identity digests our package caches (``identity_tag``'s LRU)."""
    info = getattr(identity_tag, "cache_info", None)
    return int(info().maxsize or 0) if info is not None else 0


def growth(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours with 1, 3 and 6 layers on 1 and 2 identities; 10,000 clients against one."""
    environ = base_environ()
    variants = yardsticks(url, environ)
    for strategy in GROWTH_STRATEGIES:
        for layers, identities in GROWTH_SHAPES:
            spec, specs = LAYER_SPECS[layers], IDENTITY_SETS[identities]
            name = f"{strategy} {layers}x{identities}"
            app = our_app(
                url, f"rl-g-{strategy}-{layers}-{identities}:", spec=spec, strategy=strategy, identities=specs
            )
            label = f"ours {strategy}, {plural(layers, 'layer')} x {plural(identities, 'identity')}"
            variants.append(our_variant(name, label, app, environ, header="RateLimit"))
    many = distinct_environs(environ, s.identities)
    app = our_app(url, "rl-g-many:", strategy="fixed-window")
    label = f"ours fixed-window, 3x2, {s.identities:,} clients in turn"
    crowd = our_variant("many", label, app, many)
    variants.append(crowd)
    warm_up(variants, 5)
    for variant in variants:
        check(variant, environ)
    crowd.run(len(many))  # every client once: their counters exist, as a returning crowd's would
    warm_up(variants, max(s.growth_batch, 50))
    results = time_and_count(variants, admin, s.growth_rounds, s.growth_batch, 2, s.count)
    for name, entry in results.items():
        if name == "many":
            entry["base"] = "fixed-window 3x2"  # the same app, one hot client
        elif " " in name:
            entry["base"] = name.split()[0] + " 1x1"
        base = results.get(entry.get("base", ""))
        if base is not None:
            entry["vs_base"] = ratio(entry["added_us"], base["added_us"])
            entry["redis_vs_base"] = ratio(entry["server_us_per_request"], base["server_us_per_request"])
    return {"results": results}


#: Section 4's rows that have a target, and its name.
GROWTH_TARGETS = {"fixed-window 1x1": "growth-1x1", "fixed-window 6x3": "growth-6x3"}


def growth_rows(section: Mapping[str, Any]) -> list[list[str]]:
    title = "4. How our cost grows; ratio = added us / the 1 x 1 row's (many clients: / the one-client 3 x 2 row's)"
    rows: list[list[str]] = [[title]]
    for name, r in section["results"].items():
        if name in ("ping", "bare"):
            continue
        rows.append(
            [
                "  " + r["label"],
                fmt(r["added_us"]),
                f"{r['added_pings']:.2f}x",
                f"{r['vs_base']:.2f}x" if r.get("vs_base") and name != r.get("base") else "",
                fmt_count(r["client_commands"]),
                fmt_count(r["server_commands"]),
                fmt(r["server_us_per_request"]),
                "",
                target_cell(TARGETS[GROWTH_TARGETS[name]], r["added_pings"]) if name in GROWTH_TARGETS else "",
            ]
        )
    return rows


# --- section 5: flood -----------------------------------------------------------------------------


def cache_supported() -> bool:
    """Whether this version of the package knows ``RATELIMIT_BLOCK_CACHE_SIZE``."""
    return CACHE_SETTING in our_config.DEFAULTS


def refusing_app() -> Flask:
    """The bare app, answering every request 429 from a hook: what any refusal costs Flask."""
    app = bare_app("refusing")

    def refuse() -> None:
        raise TooManyRequests(retry_after=60)

    app.before_request(refuse)
    return app


def flood(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """One client over ``1/m`` keeps asking: what each refused request costs."""
    environ = base_environ()
    variants = yardsticks(url, environ)
    app = refusing_app()
    variants.append(Variant("refuse", "no limiter, Flask answering 429 itself", wsgi_runner(app, environ),
                            app=app, status="429"))  # fmt: skip
    statuses: dict[str, Counter[str]] = {}
    default = our_config.DEFAULTS.get(CACHE_SETTING)
    for name, label, config in (
        ("cache-default", f"ours, block cache default ({default})", {}),
        ("cache-off", "ours, block cache off (0)", {CACHE_SETTING: 0}),
    ):
        app = our_app(url, f"rl-f-{name}:", spec=FLOOD_SPEC, config=config)
        statuses[name] = Counter()
        variants.append(
            our_variant(name, label, app, environ, statuses=statuses[name], header="Retry-After", status="429")
        )
    app, _limiter = flask_limiter_app(url, "fixed-window", FLASK_LIMITER_FLOOD_SPEC)
    statuses["fl"] = Counter()
    variants.append(
        Variant(
            "fl",
            "Flask-Limiter fixed-window",
            wsgi_runner(app, environ, statuses["fl"]),
            app=app,
            header="Retry-After",
            status="429",
        )
    )
    for variant in variants[3:]:
        variant.run(1)  # admitted: the quota is spent
    for variant in variants:
        check(variant, environ)
    warm_up(variants, 5)
    for counted in statuses.values():
        counted.clear()  # from here on, only the flood
    results = time_and_count(variants, admin, s.flood_rounds, s.flood_batch, 1, s.flood_requests, statuses)
    for name, counted in statuses.items():
        results[name]["statuses"] = dict(counted)
    off = results["cache-off"]
    for name in ("refuse", "cache-default", "cache-off", "fl"):
        results[name]["vs_cache_off"] = ratio(results[name]["added_us"], off["added_us"])
    return {"results": results, "cache_supported": cache_supported(), "cache_default": default}


def flood_rows(section: Mapping[str, Any]) -> list[list[str]]:
    title = f"5. Flood: one client over {FLOOD_SPEC} (2 identities), per refused request; ratio = added us / cache off"
    rows: list[list[str]] = [[title]]
    for name, r in section["results"].items():
        if name in ("ping", "bare"):
            continue
        target = ""
        if name == "cache-default":
            target = target_cell(TARGETS["flood-commands"], r["client_commands"])
        rows.append(
            [
                "  " + r["label"],
                fmt(r["added_us"]),
                f"{r['added_pings']:.2f}x",
                f"{r['vs_cache_off']:.2f}x" if r.get("vs_cache_off") and name != "cache-off" else "",
                fmt_count(r["client_commands"]),
                fmt_count(r["server_commands"]),
                fmt(r["server_us_per_request"]),
                "",
                target,
            ]
        )
    return rows


# --- section 6: memory ---------------------------------------------------------------------------


def memory(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Redis memory per client, ours and Flask-Limiter's, fixed-window with
    ``memory.py``'s three layers on the IP: the growth of ``used_memory`` when
    distinct clients send one request each, the median of a few runs."""
    clock = memory_bench.Clock(admin)
    subjects = {
        "ours": memory_bench.our_subject(url, "fixed-window", clock),
        "fl": memory_bench.flask_limiter_subject(url, "fixed-window", admin),
    }
    results: dict[str, Any] = {}
    with memory_bench.flask_limiter_clock(clock):
        for name, subject in subjects.items():
            runs = []
            for _ in range(s.memory_repeat):
                clock.reset()
                runs.append(memory_bench.bulk(admin, subject, s.memory_identities)["bytes_per_identity"])
            admin.flushall()
            results[name] = {"label": subject.name, "bytes_per_client": statistics.median(runs), "runs": runs}
    value = ratio(results["ours"]["bytes_per_client"], results["fl"]["bytes_per_client"])
    # MEMORY USAGE of one identity's key, each packed strategy, after one request.
    usage: dict[str, int] = {}
    for strategy in PACKED_STRATEGIES:
        admin.flushall()
        clock.reset()
        subject = memory_bench.our_subject(url, strategy, clock)
        usage[strategy] = sum(memory_bench.one_request(admin, subject, clock).key_bytes.values())
    admin.flushall()
    return {
        "results": results,
        "spec": memory_bench.SPEC,
        "identities": s.memory_identities,
        "ratio": value or 0.0,
        "usage": usage,
    }


#: The strategies that pack an identity's layers into one string, whose
#: ``MEMORY USAGE`` per identity section 6 checks against its target.
PACKED_STRATEGIES = ("fixed-window", "gcra", "sliding-window")
USAGE_TARGETS = {
    "fixed-window": "memory-usage-packed",
    "gcra": "memory-usage-packed",
    "sliding-window": "memory-usage-sw",
}


def memory_rows(section: Mapping[str, Any]) -> list[list[str]]:
    title = (
        f"6. Redis memory per client ({section['spec']}, fixed-window, {section['identities']:,} clients): "
        "used_memory growth / client; ratio = ours / Flask-Limiter's"
    )
    rows: list[list[str]] = [[title]]
    for name, r in section["results"].items():
        vs = f"{section['ratio']:.2f}x" if name == "ours" else ""
        target = target_cell(TARGETS["memory-per-client"], section["ratio"]) if name == "ours" else ""
        rows.append(["  " + f"{r['label']}: {r['bytes_per_client']:.0f} bytes", "", "", vs, "", "", "", "", target])
    for strategy, used in section.get("usage", {}).items():
        target = target_cell(TARGETS[USAGE_TARGETS[strategy]], used)
        rows.append(
            ["  " + f"ours {strategy}: MEMORY USAGE {used} bytes per identity", "", "", "", "", "", "", "", target]
        )
    return rows


# --- section 7: end to end ------------------------------------------------------------------------


def end_to_end(url: str, s: Settings) -> dict[str, Any]:
    """gunicorn with no limiter, ours and Flask-Limiter: requests per second."""
    targets = [
        e2e.Target("none", "no limiter", {"BENCH_LIMITER": "none"}, None),
        e2e.Target("ours", "ours fixed-window", {"BENCH_LIMITER": "ours"}, "RateLimit"),
        e2e.Target("fl", "Flask-Limiter fixed-window", {"BENCH_LIMITER": "flask-limiter"}, "X-RateLimit-Remaining"),
    ]
    server = e2e.ServerSettings(workers=s.workers, threads=s.threads)
    loads = e2e.LoadSettings(rounds=s.e2e_rounds, seconds=s.e2e_seconds, connections=s.e2e_connections)
    try:
        servers = e2e.run(url, targets, server, loads)
    except (RuntimeError, OSError) as error:
        return {"error": str(error)}
    return {"results": e2e.summarize(servers), "server": asdict(server), "load": asdict(loads)}


def e2e_rows(section: Mapping[str, Any], s: Settings) -> list[list[str]]:
    title = (
        f"7. End to end: gunicorn, {s.workers} gthread workers x {s.threads} threads, {s.e2e_connections} "
        "keep-alive connections; ratio = req/s / no limiter's"
    )
    if "error" in section:
        return [[title], [f"  gunicorn could not be run: {section['error'].splitlines()[0]}"]]
    rows: list[list[str]] = [[title]]
    for name, r in section["results"].items():
        target = target_cell(TARGETS["e2e-throughput"], r["vs_no_limiter"] or 0.0) if name == "ours" else ""
        vs = f"{r['vs_no_limiter']:.2f}x"
        rows.append(["  " + r["label"], "", "", vs, "", "", "", f"{r['requests_per_second']:.0f}", target])
    return rows


# --- section 8: local:// -------------------------------------------------------------------------


def local_storage(url: str, s: Settings) -> dict[str, Any]:
    """Ours (fixed-window, 3 layers x 2 identities) on ``local://`` beside
    ours on ``redis://``, interleaved in the same rounds. The local server
    is started from the binary the suite's server runs (not the one
    ``local://`` would pick), so that the two differ only in how the app
    reaches them: a Unix socket, and a connection that starts the server,
    against loopback TCP. It is stopped at the end."""
    environ = base_environ()
    folder = local.LocalFolder(tempfile.mkdtemp(prefix="frt-bench-"))
    saved = local.find_server_binary
    local.find_server_binary = find_redis_server
    try:
        variants = yardsticks(url, environ)
        for name, label, where in (
            ("ours-redis", "ours fixed-window on redis:// (loopback TCP)", url),
            ("ours-local", "ours fixed-window on local:// (Unix socket)", f"local://{folder.path}"),
        ):
            app = our_app(where, f"rl-{name}:")
            variants.append(our_variant(name, label, app, environ, client=our_client(app), header="RateLimit"))
        warm_up(variants, 5)
        for variant in variants:
            check(variant, environ)
        warm_up(variants, max(s.batch, 50))
        measure(variants, s.rounds, s.batch, s.warmup)
        status = local.server_status(folder)
    finally:
        local.find_server_binary = saved
        local.stop_server(folder)
        shutil.rmtree(folder.path, ignore_errors=True)
    timed = figures(variants)
    results = {name: timed[name] for name in ("ping", "ours-redis", "ours-local")}
    ratio_local = ratio(results["ours-local"]["added_us"], results["ours-redis"]["added_us"])
    return {"results": results, "ratio": ratio_local, "server": f"{status.product} {status.version}"}


def local_rows(section: Mapping[str, Any]) -> list[list[str]]:
    title = f"8. local:// beside redis:// ({section['server']} for both); ratio = local:// / redis://"
    rows: list[list[str]] = [[title]]
    for name, r in section["results"].items():
        if name == "ping":
            continue
        local_row = name == "ours-local"
        vs = f"{section['ratio']:.2f}x" if local_row else ""
        target = target_cell(TARGETS["local-vs-redis"], section["ratio"] or 0.0) if local_row else ""
        rows.append(["  " + r["label"], fmt(r["added_us"]), f"{r['added_pings']:.2f}x", vs, "", "", "", "", target])
    return rows


# --- section 9: Redis Cluster ---------------------------------------------------------------------

#: Section 9's commands whose Redis time is a decision's: our scripts.
CLUSTER_SCRIPTS = ("evalsha", "eval")


def cluster(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours on a throwaway 3-master cluster, beside ours on the single node and
    Flask-Limiter on the same cluster, 3 layers x 2 identities on 2 masters."""
    with redis_cluster(masters=3) as nodes:
        masters = [redis.Redis(port=node.port, **client_options()) for node in nodes.masters()]
        try:
            return cluster_section(url, admin, nodes.url, masters, s)
        finally:
            for client in masters:
                client.close()


def two_node_user(app: Flask) -> tuple[str, list[str]]:
    """A user whose counters live on another master than :data:`harness.CLIENT_IP`'s,
    and the two masters (``host:port``)."""
    throttle = app.extensions["ratelimit"].throttle
    policy = Policy(parse_limits(SPEC), "index")

    def node(identity: Identity) -> str:
        return str(throttle.storage.nodes([throttle.key(policy, identity)])[0])

    ip_node = node(Identity("ip", CLIENT_IP))
    user = next(user for user in (f"user{i}" for i in range(1000)) if node(Identity("user", user)) != ip_node)
    return user, [ip_node, node(Identity("user", user))]


def two_node_floor_app(clients: Sequence[redis.Redis]) -> Flask:
    """The bare app plus one ``PING`` to each of ``clients``' servers, both
    written before either reply is read: the least a limiter whose request
    touches two cluster nodes can add."""
    app = bare_app("floor-2")

    def overlapped_round_trips() -> None:
        taken = [(client.connection_pool, client.connection_pool.get_connection()) for client in clients]
        for _, connection in taken:
            connection.send_command("PING")
        for pool, connection in taken:
            connection.read_response()
            pool.release(connection)

    app.before_request(overlapped_round_trips)
    return app


def cluster_section(
    url: str, admin: redis.Redis, cluster_url: str, masters: Sequence[redis.Redis], s: Settings
) -> dict[str, Any]:
    ours = our_app(cluster_url, "rl-c:")
    user, nodes = two_node_user(ours)
    environ = base_environ(CLIENT_IP, user)
    variants = yardsticks(url, environ)
    node_clients = []
    for node in nodes:
        host, port = node.rsplit(":", 1)
        node_clients.append(redis.Redis(host=host, port=int(port), **client_options()))
    floor = floor_app(redis.Redis.from_url(url, **client_options()))
    floor_2 = two_node_floor_app(node_clients)
    single = our_app(url, "rl-c-single:")
    variants += [
        Variant("floor", "Flask app + 1 PING/request, one node (floor)", wsgi_runner(floor, environ), app=floor),
        Variant(
            "floor-2",
            "Flask app + 1 PING to each of the 2 nodes, overlapped (floor)",
            wsgi_runner(floor_2, environ),
            app=floor_2,
        ),
        our_variant("single", "ours fixed-window, one node", single, environ, header="RateLimit"),
        our_variant("cluster", "ours fixed-window, 3-master cluster", ours, environ, header="RateLimit"),
    ]
    fl, _limiter = flask_limiter_app(cluster_url, "fixed-window")
    label = "Flask-Limiter fixed-window, same cluster"
    variants.append(Variant("fl", label, wsgi_runner(fl, environ), app=fl, header="X-RateLimit-Remaining"))
    warm_up(variants, 5)
    for variant in variants:
        check(variant, environ)
    warm_up(variants, max(s.batch, 50))
    measure(variants, s.rounds, s.batch, s.warmup)
    servers = {"single": [admin], "cluster": list(masters), "fl": list(masters)}
    for variant in variants:
        if variant.name in servers:
            variant.counts = cluster_counts(variant, servers[variant.name], s.count)
    results = figures(variants)
    results["floor-2"]["vs_single"] = ratio(results["floor-2"]["added_us"], results["floor"]["added_us"])
    results["cluster"]["vs_single"] = ratio(results["cluster"]["added_us"], results["single"]["added_us"])
    results["fl"]["vs_ours"] = ratio(results["fl"]["added_us"], results["cluster"]["added_us"])
    cpu = ratio(results["cluster"]["script_us_per_request"], results["single"]["script_us_per_request"])
    results["cluster"]["script_vs_single"] = cpu
    return {"results": results, "user": user, "masters": len(masters)}


def cluster_counts(variant: Variant, servers: Sequence[redis.Redis], requests: int) -> dict[str, Any]:
    """What the variant sends per request, and Redis's time for it summed
    over ``servers``: for the scripts (our decisions), and for every command."""
    before = [command_stats(server) for server in servers]
    with counting_commands() as sent:
        variant.run(requests)
    after = [command_stats(server) for server in servers]
    calls: Counter[str] = Counter()
    usec: Counter[str] = Counter()
    for old, new in zip(before, after, strict=True):
        for name, (n, us) in new.items():
            if name in ("info", "ping") or name.startswith(("cluster", "command")):
                continue  # this function's and redis-py's own
            calls[name] += n - old.get(name, (0, 0))[0]
            usec[name] += us - old.get(name, (0, 0))[1]
    client = {name: n / requests for name, n in sent.items() if not name.startswith("#")}
    return {
        "requests": requests,
        "client_commands": sum(client.values()),
        "client_by_command": dict(sorted(client.items())),
        "round_trips": sent["#replies"] / requests,
        "server_commands": sum(calls.values()) / requests,
        "server_by_command": {name: n / requests for name, n in sorted(calls.items()) if n},
        "server_us_per_request": sum(usec.values()) / requests,
        "script_us_per_request": sum(usec[name] for name in CLUSTER_SCRIPTS) / requests,
    }


def cluster_rows(section: Mapping[str, Any]) -> list[list[str]]:
    results = section["results"]
    title = (
        f"9. Redis Cluster, {section['masters']} masters: 3 layers x 2 identities on 2 nodes; ratio = cluster / "
        "one node (Flask-Limiter: / ours on the cluster)"
    )
    rows: list[list[str]] = [[title]]
    cells = {
        "floor-2": (results["floor-2"]["vs_single"], None),
        "cluster": (results["cluster"]["vs_single"], "cluster-vs-single"),
        "fl": (results["fl"]["vs_ours"], "cluster-flask-limiter-ratio"),
    }
    for name, r in results.items():
        if name in ("ping", "bare"):
            continue
        value, target = cells.get(name, (None, None))
        rows.append(
            [
                "  " + r["label"],
                fmt(r["added_us"]),
                f"{r['added_pings']:.2f}x",
                f"{value:.2f}x" if value else "",
                fmt_count(r.get("client_commands")),
                fmt_count(r.get("server_commands")),
                fmt(r.get("server_us_per_request")),
                "",
                target_cell(TARGETS[target], value or 0.0) if target else "",
            ]
        )
    cpu = results["cluster"]["script_vs_single"] or 0.0
    rows.append(
        [
            "  ours, Redis script us per decision: cluster / one node",
            "",
            "",
            f"{cpu:.2f}x",
            "",
            "",
            f"{results['cluster']['script_us_per_request']:.1f}",
            "",
            target_cell(TARGETS["cluster-redis-cpu"], cpu),
        ]
    )
    return rows


# --- the report -----------------------------------------------------------------------------------

HEADERS = ("variant", "added us", "x PING", "ratio", "cmds sent", "Redis cmds", "Redis us", "req/s", "target")


def verdict(met: bool) -> str:
    return "MET" if met else "MISSED"


def target_cell(target: Target, value: float) -> str:
    """The table's target column: ``<=1.8x PING MET``."""
    met = value <= target.bound if target.at_most else value >= target.bound
    return f"{target.relation}{target.bound:g}{target.unit} {verdict(met)}"


# --- section 10: memory:// -----------------------------------------------------------------------


def embedded(s: Settings) -> dict[str, Any]:
    """Ours on ``memory://`` (the embedded store) and Flask-Limiter's
    ``memory://``, admitted requests, interleaved as in section 1-3: no Redis."""
    environ = base_environ()
    app = bare_app()
    variants = [Variant("bare", "Flask app, no limiter", wsgi_runner(app, environ), app=app)]
    for strategy in OUR_STRATEGIES:
        app = our_app("memory://", strategy=strategy)
        variants.append(
            our_variant(f"ours-{strategy}", f"ours {strategy}, memory://", app, environ, header="RateLimit")
        )
    for strategy in FLASK_LIMITER_STRATEGIES:
        app, _limiter = flask_limiter_app("memory://", strategy)
        variants.append(
            Variant(
                f"fl-{strategy}",
                f"Flask-Limiter {strategy}, memory://",
                wsgi_runner(app, environ),
                app=app,
                header="X-RateLimit-Remaining",
            )
        )
    warm_up(variants, 5)
    for variant in variants:
        check(variant, environ)
    warm_up(variants, max(s.batch, 50))
    measure(variants, s.rounds, s.batch, s.warmup)
    results = figures(variants)
    for strategy in FLASK_LIMITER_STRATEGIES:
        ours = results[f"ours-{LIKE_FOR_LIKE[strategy]}"]
        ours["flask_limiter"] = f"fl-{strategy}"
        ours["vs_flask_limiter"] = ratio(ours["added_us"], results[f"fl-{strategy}"]["added_us"])
    return {"results": results}


def embedded_rows(section: Mapping[str, Any]) -> list[list[str]]:
    title = "10. memory://, no Redis: admitted, 3 layers x 2 identities; ratio = ours / Flask-Limiter, like for like"
    rows: list[list[str]] = [[title]]
    for name, r in section["results"].items():
        if name == "bare":
            continue
        target = ""
        if name == "ours-fixed-window":
            target = target_cell(TARGETS["memory-vs-flask-limiter"], r["vs_flask_limiter"] or 0.0)
        vs = f"{r['vs_flask_limiter']:.2f}x" if r.get("vs_flask_limiter") else ""
        rows.append(["  " + r["label"], fmt(r["added_us"]), "", vs, "", "", "", "", target])
    return rows


def goal(name: str, value: float, what: str | None = None) -> dict[str, Any]:
    """One target of :data:`harness.TARGETS`: its figure, whether it is met, and
    by what factor it is missed. ``what`` overrides the target's words, for a
    target checked on several pairs."""
    target = TARGETS[name]
    met = value <= target.bound if target.at_most else value >= target.bound
    factor = (value / target.bound if target.at_most else target.bound / value) if value > 0 else float("inf")
    return {"name": name, "what": what or target.what, "value": value, "target": target.bound, "unit": target.unit,
            "at_most": target.at_most, "met": met, "factor": factor}  # fmt: skip


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every target, its figure and whether it is met."""
    found: list[dict[str, Any]] = []
    sections = report["sections"]
    if "admitted" in sections:
        results = sections["admitted"]["results"]
        for strategy in OUR_STRATEGIES:
            found.append(goal(f"ours-{strategy}", results[f"ours-{strategy}"]["added_pings"]))
        for strategy in FLASK_LIMITER_STRATEGIES:
            value = results[f"fl-{strategy}"]["vs_ours"] or 0.0
            what = f"Flask-Limiter {strategy}'s added time / ours {LIKE_FOR_LIKE[strategy]}'s"
            found.append(goal("flask-limiter-ratio", value, what))
        for strategy in FLASK_LIMITER_STRATEGIES:
            ours = results[f"ours-{LIKE_FOR_LIKE[strategy]}"]["server_us_per_request"]
            value = ratio(ours, results[f"fl-{strategy}"]["server_us_per_request"]) or 0.0
            what = f"Redis time per decision: ours {LIKE_FOR_LIKE[strategy]} / Flask-Limiter {strategy}"
            found.append(goal("redis-cpu", value, what))
    if "growth" in sections:
        results = sections["growth"]["results"]
        for row, name in GROWTH_TARGETS.items():
            found.append(goal(name, results[row]["added_pings"]))
    if "flood" in sections:
        found.append(goal("flood-commands", sections["flood"]["results"]["cache-default"]["client_commands"]))
    if "memory" in sections:
        found.append(goal("memory-per-client", sections["memory"]["ratio"]))
        for strategy, used in sections["memory"].get("usage", {}).items():
            found.append(goal(USAGE_TARGETS[strategy], used, f"MEMORY USAGE per identity, {strategy}, 3 layers"))
    if "e2e" in sections and "results" in sections["e2e"]:
        found.append(goal("e2e-throughput", sections["e2e"]["results"]["ours"]["vs_no_limiter"]))
    if "local" in sections:
        found.append(goal("local-vs-redis", sections["local"]["ratio"] or 0.0))
    if "cluster" in sections:
        results = sections["cluster"]["results"]
        found.append(goal("cluster-vs-single", results["cluster"]["vs_single"] or 0.0))
        found.append(goal("cluster-flask-limiter-ratio", results["fl"]["vs_ours"] or 0.0))
        found.append(goal("cluster-redis-cpu", results["cluster"]["script_vs_single"] or 0.0))
    if "embedded" in sections:
        value = sections["embedded"]["results"]["ours-fixed-window"]["vs_flask_limiter"] or 0.0
        found.append(goal("memory-vs-flask-limiter", value))
    return found


def target_lines(found: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for t in found:
        relation = "<=" if t["at_most"] else ">="
        state = "MET" if t["met"] else f"MISSED by a factor of {t['factor']:.2f}"
        lines.append(f"{t['what']}: {t['value']:.3g} {t['unit'].strip()} (target {relation} {t['target']:g}): {state}")
    return lines


def notes(report: Mapping[str, Any], s: Settings) -> list[str]:
    """The short notes under the table."""
    sections = report["sections"]
    lines = [
        "added us: median over rounds of (app - bare app in the same round), per request; for PING its own time. "
        "x PING: / PING's time in the same section's rounds.",
        "cmds sent: commands redis-py sent per request; Redis cmds: per request from INFO commandstats, "
        "including those scripts run; Redis us: commandstats usec of the commands sent, per request.",
        "Like for like: Flask-Limiter fixed-window ~ ours fixed-window, moving-window ~ sliding-log, "
        "sliding-window-counter ~ sliding-window. Each section times its own rounds: compare within a section.",
    ]
    if "admitted" in sections:
        results = sections["admitted"]["results"]
        for strategy in FLASK_LIMITER_STRATEGIES:
            low, high = results[f"fl-{strategy}"]["vs_ours_range"]
            lines.append(
                f"Flask-Limiter {strategy} adds {low:.1f}x to {high:.1f}x as much as ours, over our strategies."
            )
    if "growth" in sections:
        cached = digest_cache_size()
        cache = f"; ours caches {cached:,} identity digests, here {2 * s.identities:,} cycle" if cached else ""
        lines.append(
            f"{s.identities:,} clients: each request a new address and user (each client seen once before, so its "
            f"counters exist){cache}."
        )
    if "flood" in sections:
        flood_section = sections["flood"]
        if not flood_section["cache_supported"]:
            lines.append(f"{CACHE_SETTING} is unknown to this version of the package: both cache rows run uncached.")
        cached, uncached = (flood_section["results"][n]["per_call_us"] for n in ("cache-default", "cache-off"))
        lines.append(
            f"Flood: {s.flood_requests:,} refused requests per variant, timed and again counted, as fast as one "
            f"thread sends them: {1e6 / cached:,.0f}/s with the cache, {1e6 / uncached:,.0f}/s without."
        )
        for name in ("cache-default", "cache-off", "fl"):
            r = flood_section["results"][name]
            sent = ", ".join(f"{k} {fmt_count(v)}" for k, v in r["client_by_command"].items()) or "nothing"
            admitted_count = r["statuses"].get("200", 0)
            extra = f"; {admitted_count} admitted at a window's turn" if admitted_count else ""
            lines.append(f"Flood, {r['label']}: sends {sent} per refused request{extra}.")
    if "e2e" in sections and "results" in sections["e2e"]:
        results = sections["e2e"]["results"]
        parts = [f"{r['label']} {r['latency_ms_median']:.1f} ms" for r in results.values() if r["latency_ms_median"]]
        errors = sum(r["errors"] for r in results.values())
        lines.append(
            f"End to end: medians of {s.e2e_rounds} rounds of {s.e2e_seconds:g} s per server, load generator "
            f"(Python threads, http.client) on the same {report['environment']['cpus']} CPUs as gunicorn and Redis; "
            f"median latency {', '.join(parts)}; {errors} errors."
        )
    return lines


def plot(report: Mapping[str, Any], path: str) -> None:
    """A bar chart of the time added per admitted request, and of end-to-end throughput."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit('--plot needs matplotlib: pip install matplotlib (or -e ".[docs]")')
    sections = report["sections"]
    results = sections["admitted"]["results"]
    names = [n for n in results if n not in ("ping", "bare")]
    ping = results["ping"]["per_call_us"]
    has_e2e = "results" in sections.get("e2e", {})
    figure, axes = plt.subplots(1, 2 if has_e2e else 1, figsize=(11 if has_e2e else 7, 4.2), squeeze=False,
                                gridspec_kw={"width_ratios": [2, 1]} if has_e2e else None)  # fmt: skip
    left = axes[0][0]
    values = [results[n]["added_us"] for n in names]
    colours = ["#999999" if n == "floor" else "#2a7ab9" if n.startswith("ours") else "#d9822b" for n in names]
    bars = left.barh([results[n]["label"] for n in names], values, color=colours)
    for bar, name in zip(bars, names, strict=True):
        left.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {results[name]['added_pings']:.1f}x PING",
                  va="center", fontsize=8)  # fmt: skip
    bound = TARGETS["ours-fixed-window"].bound
    left.axvline(ping * bound, color="#2a7ab9", linestyle="--", linewidth=1,
                 label=f"target for ours fixed-window and gcra: {bound:g}x PING")  # fmt: skip
    left.legend(loc="upper right", fontsize=8)
    left.invert_yaxis()
    left.set_xlabel(f"time added per admitted request, us (PING = {ping:.0f} us)")
    left.set_xlim(0, max(values) * 1.25)
    left.set_title("3 layers x 2 identities, in process", fontsize=10)
    if has_e2e:
        right = axes[0][1]
        e2e_results = sections["e2e"]["results"]
        labels = [r["label"] for r in e2e_results.values()]
        rates = [r["requests_per_second"] for r in e2e_results.values()]
        bars = right.barh(labels, rates, color=["#999999", "#2a7ab9", "#d9822b"][: len(rates)])
        for bar, r in zip(bars, e2e_results.values(), strict=True):
            right.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {r['vs_no_limiter']:.2f}x",
                       va="center", fontsize=8)  # fmt: skip
        right.set_xlim(0, max(rates) * 1.3)
        right.invert_yaxis()
        right.set_xlabel("requests per second")
        right.set_title("gunicorn end to end", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# --- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="What a rate limiter costs, ours beside Flask-Limiter's: one report.")
    parser.add_argument("--quick", action="store_true", help="under a minute: few, short rounds (for CI)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure, and the raw samples, to PATH")
    parser.add_argument(
        "--no-samples",
        action="store_true",
        help="leave the raw per-round samples out of --json: the small file the docs are rendered from",
    )
    parser.add_argument("--plot", metavar="PATH", help="also draw a bar chart (PNG) to PATH; needs matplotlib")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"which sections to run, comma separated (default: all of {','.join(SECTIONS)})",
    )
    args = parser.parse_args(argv)
    chosen = {x.strip() for x in args.sections.split(",") if x.strip()}
    args.sections = tuple(name for name in SECTIONS if name in chosen)  # always in the report's order
    unknown = sorted(chosen - set(SECTIONS))
    if unknown or not args.sections:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    if args.plot and "admitted" not in args.sections:
        parser.error("--plot needs the admitted section")
    return args


def reproduce_command(args: argparse.Namespace) -> str:
    command = ["python", "benchmarks/suite.py"]
    if args.quick:
        command.append("--quick")
    if args.sections != SECTIONS:
        command += ["--sections", ",".join(args.sections)]
    return shlex.join(command)


def run_sections(url: str, admin: redis.Redis, s: Settings, sections: Sequence[str]) -> dict[str, Any]:
    """Run the chosen sections, in order, each against a flushed Redis."""
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "admitted": lambda: admitted(url, admin, s),
        "growth": lambda: growth(url, admin, s),
        "flood": lambda: flood(url, admin, s),
        "memory": lambda: memory(url, admin, s),
        "e2e": lambda: end_to_end(url, s),
        "local": lambda: local_storage(url, s),
        "cluster": lambda: cluster(url, admin, s),
        "embedded": lambda: embedded(s),
    }
    done: dict[str, Any] = {}
    for name in sections:
        admin.flushall()
        started = time.monotonic()
        print(f"  {name}...", file=sys.stderr, flush=True)
        done[name] = steps[name]()
        done[name]["seconds"] = round(time.monotonic() - started, 1)
    return done


def drop_samples(report: Mapping[str, Any]) -> None:
    """Remove every variant's raw per-round samples from the report."""
    for section in report["sections"].values():
        for entry in section.get("results", {}).values():
            if isinstance(entry, dict):
                entry.pop("samples_us", None)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    s = QUICK if args.quick else FULL
    started = time.monotonic()
    with redis_server() as server:
        admin = redis.Redis.from_url(server.url, **client_options())
        server_version = admin.info("server")["redis_version"]
        print(f"redis-server {server_version} on 127.0.0.1:{server.port}", file=sys.stderr)
        sections = run_sections(server.url, admin, s, args.sections)
        parsers = sections.get("admitted", {}).get("parsers") or {"admin": parser_name(admin)}
        admin.close()
    report: dict[str, Any] = {
        "command": reproduce_command(args),
        "environment": environment(server_version, parsers),
        "settings": {**asdict(s), "quick": args.quick, "sections": list(args.sections)},
        "sections": sections,
    }
    report["targets"] = targets(report)
    report["seconds"] = round(time.monotonic() - started, 1)

    rows: list[list[str]] = []
    builders: dict[str, Callable[[Mapping[str, Any]], list[list[str]]]] = {
        "admitted": admitted_rows,
        "growth": growth_rows,
        "flood": flood_rows,
        "memory": memory_rows,
        "e2e": lambda section: e2e_rows(section, s),
        "local": local_rows,
        "cluster": cluster_rows,
        "embedded": embedded_rows,
    }
    for name in args.sections:
        rows += builders[name](sections[name])
    print()
    print(f"flask-redis-throttle beside Flask-Limiter{' (--quick: rough figures)' if args.quick else ''}")
    print(describe(report["environment"]))
    report["table"] = render_table(HEADERS, rows)
    report["notes"] = notes(report, s) + target_lines(report["targets"])
    print()
    print(report["table"])
    print()
    for line in report["notes"]:
        print(f"* {line}")
    print(f"* {report['seconds']:.0f} s in all. Reproduce: {report['command']}")
    if args.json:
        if args.no_samples:
            drop_samples(report)
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1)
            out.write("\n")
        print(f"Wrote {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"Wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
