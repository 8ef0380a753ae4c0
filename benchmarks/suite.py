#!/usr/bin/env python
"""One command, one report: what a rate limiter costs, ours beside Flask-Limiter's.

Everything runs against one throwaway ``redis-server`` on a free loopback port
(:func:`flask_redis_throttle.testing.redis_server`), never a Redis you run.
The apps, variants, timing and counting are ``harness.py``'s, shared with
``overhead.py``; ``benchmarks/README.md`` says what each section measures:

1-3. admitted requests, our four strategies and Flask-Limiter's three;
4. how our cost grows with layers, identities and clients; 5. a flood of
refused requests; 6. Redis memory per client (``memory.py``'s bulk pattern);
7. gunicorn end to end (``e2e.py``); 8. ``local://`` beside ``redis://``;
9. a 3-master Redis Cluster beside one node; 10. ``memory://``, no Redis.

Times come from interleaved rounds (every variant runs a batch each round,
the order rotating), paired by round with the bare app: the medians of
(variant - bare app). Commands are counted in a separate, untimed phase.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import e2e
import memory as memory_bench
import redis
from harness import (
    CLIENT_IP,
    FLASK_LIMITER_STRATEGIES,
    LIKE_FOR_LIKE,
    OUR_STRATEGIES,
    SPEC,
    TARGETS,
    Variant,
    bare_variant,
    base_environ,
    canned_variant,
    client_options,
    describe,
    distinct_environs,
    environment,
    figures,
    flask_limiter_variant,
    floor_variant,
    fmt,
    fmt_count,
    our_app,
    our_variant,
    parser_name,
    prepare,
    ratio,
    refusing_variant,
    render_table,
    round_trip_variant,
    split,
    tally,
    time_and_count,
    user_key,
    yardsticks,
)

from flask_redis_throttle import Identity
from flask_redis_throttle._request import config as our_config
from flask_redis_throttle.core.engine.keys import identity_tag
from flask_redis_throttle.core.engine.rates import parse_limits
from flask_redis_throttle.core.engine.throttle import Policy
from flask_redis_throttle.core.storages import local
from flask_redis_throttle.testing import find_redis_server, redis_server


def tenant_key(req: Any) -> str:
    """A third identity for section 4's 6 x 3 row: the ``X-Tenant`` header, or ``default``."""
    return str(req.headers.get("X-Tenant", "default"))


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
#: Section 4's rows that have a target, and its name.
GROWTH_TARGETS = {"fixed-window 1x1": "growth-1x1", "fixed-window 6x3": "growth-6x3"}

#: Section 5: the limit the flooding client is over.
FLOOD_SPEC = "1/m"
FLASK_LIMITER_FLOOD_SPEC = "1/minute"
CACHE_SETTING = "RATELIMIT_BLOCK_CACHE_SIZE"

#: The strategies that pack an identity's layers into one string, whose
#: ``MEMORY USAGE`` per identity section 6 checks against its target.
USAGE_TARGETS = {
    "fixed-window": "memory-usage-packed",
    "gcra": "memory-usage-packed",
    "sliding-window": "memory-usage-sw",
}
PACKED_STRATEGIES = tuple(USAGE_TARGETS)

#: Section 9's commands whose Redis time is a decision's: our scripts.
CLUSTER_SCRIPTS = ("evalsha", "eval")


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
    usage_repeat: int = 5
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
    usage_repeat=1,
    memory_repeat=1,
    e2e_rounds=2,
    e2e_seconds=1.5,
)


# --- the table ------------------------------------------------------------------------------------

HEADERS = ("variant", "added us", "x PING", "ratio", "cmds sent", "Redis cmds", "Redis us", "req/s", "target")
Row = list[str]


def row(label: str, added: str = "", pings: str = "", ratio_cell: str = "", counts: Mapping[str, Any] | None = None,
        rps: str = "", target: str = "") -> Row:  # fmt: skip
    """One row of the table; ``counts``: a variant's figures, to show what it sent and Redis ran."""
    sent = ran = usec = ""
    if counts is not None:
        sent, ran = fmt_count(counts.get("client_commands")), fmt_count(counts.get("server_commands"))
        usec = fmt(counts.get("server_us_per_request"))
    return ["  " + label, added, pings, ratio_cell, sent, ran, usec, rps, target]


def timed_row(r: Mapping[str, Any], ratio_cell: str = "", target: str = "", counted: bool = True) -> Row:
    """A timed variant's row: its added time, in PINGs if the section has them, and its counts."""
    pings = f"{r['added_pings']:.2f}x" if "added_pings" in r else ""
    return row(r["label"], fmt(r["added_us"]), pings, ratio_cell, r if counted else None, target=target)


def times(value: float | None, digits: int = 2) -> str:
    """``1.24x``, or nothing when there is no ratio."""
    return f"{value:.{digits}f}x" if value else ""


#: A target a section checks: the row that shows its verdict (or ""), the
#: target's name in :data:`harness.TARGETS`, the figure, and words for it
#: when the target is checked on several pairs.
Check = tuple[str, str, float, "str | None"]


def target_cells(checks: Sequence[Check]) -> dict[str, str]:
    """The target column of each row that shows a verdict: ``<=1.8x PING MET``."""
    return {row: TARGETS[name].cell(value) for row, name, value, _what in checks}


def plural(n: int, noun: str) -> str:
    """``1 layer``, ``3 layers``; ``2 identities``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1]}ies" if noun.endswith("y") else f"{n} {noun}s"


# --- sections 1 to 3: admitted requests -----------------------------------------------------------


def admitted(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours (four strategies) and Flask-Limiter's (three) on admitted requests."""
    environ = base_environ()
    variants = [*yardsticks(url, environ), floor_variant([url], environ), round_trip_variant(url, environ)]
    variants.append(canned_variant(url, environ, "canned", "ours fixed-window, Redis's reply canned"))
    variants += [
        our_variant(f"ours-{st}", f"ours {st}", url, environ, f"rl-{st}:", strategy=st) for st in OUR_STRATEGIES
    ]
    variants += [flask_limiter_variant(url, environ, strategy) for strategy in FLASK_LIMITER_STRATEGIES]
    prepare(variants, environ, s.batch)
    parsers = {v.name: parser_name(v.client) for v in variants if v.client is not None}
    results = time_and_count(variants, admin, s.rounds, s.batch, s.warmup, s.count, keys=True)
    parts = split(variants, "ours-fixed-window", "canned")
    if parts is not None:
        results["ours-fixed-window"]["split_us"] = parts
    ours = [results[f"ours-{strategy}"]["added_us"] for strategy in OUR_STRATEGIES]
    for strategy, like in LIKE_FOR_LIKE.items():
        entry = results[f"fl-{strategy}"]
        entry["ours"] = f"ours-{like}"
        entry["vs_ours"] = ratio(entry["added_us"], results[f"ours-{like}"]["added_us"])
        entry["vs_ours_range"] = [ratio(entry["added_us"], max(ours)), ratio(entry["added_us"], min(ours))]
    return {"results": results, "parsers": parsers}


def admitted_checks(section: Mapping[str, Any]) -> list[Check]:
    results = section["results"]
    found: list[Check] = [
        (f"ours-{st}", f"ours-{st}", results[f"ours-{st}"]["added_pings"], None) for st in OUR_STRATEGIES
    ]
    for strategy, like in LIKE_FOR_LIKE.items():
        what = f"Flask-Limiter {strategy}'s added time / ours {like}'s"
        found.append((f"fl-{strategy}", "flask-limiter-ratio", results[f"fl-{strategy}"]["vs_ours"] or 0.0, what))
    for strategy, like in LIKE_FOR_LIKE.items():
        ours, theirs = results[f"ours-{like}"], results[f"fl-{strategy}"]
        value = ratio(ours["server_us_per_request"], theirs["server_us_per_request"]) or 0.0
        found.append(("", "redis-cpu", value, f"Redis time per decision: ours {like} / Flask-Limiter {strategy}"))
    return found


def admitted_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    results = section["results"]
    rows = [[f"1-3. Admitted, 3 layers x 2 identities ({SPEC}); ratio = Flask-Limiter / ours, like for like"]]
    ping = results["ping"]
    rows.append(row(ping["label"], fmt(ping["per_call_us"]), f"{ping['added_pings']:.2f}x", counts=ping))
    for name, r in results.items():
        if name not in ("ping", "bare"):
            rows.append(timed_row(r, times(r.get("vs_ours"), 1), cells.get(name, "")))
    return rows


def admitted_notes(section: Mapping[str, Any], s: Settings, report: Mapping[str, Any]) -> list[str]:
    lines = []
    for strategy in FLASK_LIMITER_STRATEGIES:
        low, high = section["results"][f"fl-{strategy}"]["vs_ours_range"]
        lines.append(f"Flask-Limiter {strategy} adds {low:.1f}x to {high:.1f}x as much as ours, over our strategies.")
    return lines


# --- section 4: how the cost grows ----------------------------------------------------------------


def digest_cache_size() -> int:
    """How many identity digests our package caches (``identity_tag``'s LRU)."""
    info = getattr(identity_tag, "cache_info", None)
    return int(info().maxsize or 0) if info is not None else 0


def growth(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours with 1, 3 and 6 layers on 1 and 2 identities; 10,000 clients against one."""
    environ = base_environ()
    variants = yardsticks(url, environ)
    for strategy in GROWTH_STRATEGIES:
        for layers, ids in GROWTH_SHAPES:
            label = f"ours {strategy}, {plural(layers, 'layer')} x {plural(ids, 'identity')}"
            variants.append(our_variant(f"{strategy} {layers}x{ids}", label, url, environ,
                                        f"rl-g-{strategy}-{layers}-{ids}:", spec=LAYER_SPECS[layers],
                                        strategy=strategy, identities=IDENTITY_SETS[ids]))  # fmt: skip
    many = distinct_environs(environ, s.identities)
    crowd = our_variant("many", f"ours fixed-window, 3x2, {s.identities:,} clients in turn", url, many, "rl-g-many:")
    variants.append(crowd)
    crowd.run(len(many))  # every client once: their counters exist, as a returning crowd's would
    prepare(variants, environ, s.growth_batch)
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


def growth_checks(section: Mapping[str, Any]) -> list[Check]:
    return [(row, name, section["results"][row]["added_pings"], None) for row, name in GROWTH_TARGETS.items()]


def growth_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    title = "4. How our cost grows; ratio = added us / the 1 x 1 row's (many clients: / the one-client 3 x 2 row's)"
    rows = [[title]]
    for name, r in section["results"].items():
        if name not in ("ping", "bare"):
            rows.append(timed_row(r, times(r.get("vs_base")) if name != r.get("base") else "", cells.get(name, "")))
    return rows


def growth_notes(section: Mapping[str, Any], s: Settings, report: Mapping[str, Any]) -> list[str]:
    cached = digest_cache_size()
    cache = f"; ours caches {cached:,} identity digests, here {2 * s.identities:,} cycle" if cached else ""
    return [
        f"{s.identities:,} clients: each request a new address and user (each client seen once before, so its "
        f"counters exist){cache}."
    ]


# --- section 5: flood -----------------------------------------------------------------------------


def flood(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """One client over ``1/m`` keeps asking: what each refused request costs."""
    environ = base_environ()
    default = our_config.DEFAULTS.get(CACHE_SETTING)
    limiters = [
        our_variant("cache-default", f"ours, block cache default ({default})", url, environ, "rl-f-cache-default:",
                    refused=True, spec=FLOOD_SPEC),
        our_variant("cache-off", "ours, block cache off (0)", url, environ, "rl-f-cache-off:", refused=True,
                    spec=FLOOD_SPEC, config={CACHE_SETTING: 0}),
        flask_limiter_variant(url, environ, "fixed-window", "Flask-Limiter fixed-window", "fl",
                              FLASK_LIMITER_FLOOD_SPEC, refused=True),
    ]  # fmt: skip
    for variant in limiters:
        variant.run(1)  # admitted: the quota is spent
    variants = [*yardsticks(url, environ), refusing_variant(environ), *limiters]
    prepare(variants, environ, s.flood_batch)  # from here on, only the flood
    results = time_and_count(variants, admin, s.flood_rounds, s.flood_batch, 1, s.flood_requests)
    for name in ("refuse", "cache-default", "cache-off", "fl"):
        results[name]["vs_cache_off"] = ratio(results[name]["added_us"], results["cache-off"]["added_us"])
    return {"results": results, "cache_supported": CACHE_SETTING in our_config.DEFAULTS, "cache_default": default}


def flood_checks(section: Mapping[str, Any]) -> list[Check]:
    return [("cache-default", "flood-commands", section["results"]["cache-default"]["client_commands"], None)]


def flood_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    title = f"5. Flood: one client over {FLOOD_SPEC} (2 identities), per refused request; ratio = added us / cache off"
    rows = [[title]]
    for name, r in section["results"].items():
        if name not in ("ping", "bare"):
            rows.append(timed_row(r, times(r["vs_cache_off"]) if name != "cache-off" else "", cells.get(name, "")))
    return rows


def flood_notes(section: Mapping[str, Any], s: Settings, report: Mapping[str, Any]) -> list[str]:
    lines = []
    if not section["cache_supported"]:
        lines.append(f"{CACHE_SETTING} is unknown to this version of the package: both cache rows run uncached.")
    cached, uncached = (section["results"][n]["per_call_us"] for n in ("cache-default", "cache-off"))
    lines.append(
        f"Flood: {s.flood_requests:,} refused requests per variant, timed and again counted, as fast as one "
        f"thread sends them: {1e6 / cached:,.0f}/s with the cache, {1e6 / uncached:,.0f}/s without."
    )
    for name in ("cache-default", "cache-off", "fl"):
        r = section["results"][name]
        sent = ", ".join(f"{k} {fmt_count(v)}" for k, v in r["client_by_command"].items()) or "nothing"
        admitted_count = r["statuses"].get("200", 0)
        extra = f"; {admitted_count} admitted at a window's turn" if admitted_count else ""
        lines.append(f"Flood, {r['label']}: sends {sent} per refused request{extra}.")
    return lines


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
    # MEMORY USAGE of one identity's key, each packed strategy, after one
    # request: the median of a few runs, as above. It reports what the
    # allocator gave the value, which with libc malloc now and then is a
    # chunk 16 bytes larger than asked for, depending on what was freed before.
    usage: dict[str, int] = {}
    usage_runs: dict[str, list[int]] = {}
    for strategy in PACKED_STRATEGIES:
        subject = memory_bench.our_subject(url, strategy, clock)
        runs = usage_runs[strategy] = []
        for _ in range(s.usage_repeat):
            admin.flushall()
            clock.reset()
            runs.append(sum(memory_bench.one_request(admin, subject, clock).key_bytes.values()))
        usage[strategy] = sorted(runs)[len(runs) // 2]
    admin.flushall()
    return {"results": results, "spec": memory_bench.SPEC, "identities": s.memory_identities, "ratio": value or 0.0,
            "usage": usage, "usage_runs": usage_runs}  # fmt: skip


def memory_checks(section: Mapping[str, Any]) -> list[Check]:
    found: list[Check] = [("ours", "memory-per-client", section["ratio"], None)]
    for strategy, used in section.get("usage", {}).items():
        found.append((strategy, USAGE_TARGETS[strategy], used, f"MEMORY USAGE per identity, {strategy}, 3 layers"))
    return found


def memory_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    title = (
        f"6. Redis memory per client ({section['spec']}, fixed-window, {section['identities']:,} clients): "
        "used_memory growth / client; ratio = ours / Flask-Limiter's"
    )
    rows = [[title]]
    for name, r in section["results"].items():
        vs = times(section["ratio"]) if name == "ours" else ""
        rows.append(row(f"{r['label']}: {r['bytes_per_client']:.0f} bytes", ratio_cell=vs, target=cells.get(name, "")))
    for strategy, used in section.get("usage", {}).items():
        rows.append(row(f"ours {strategy}: MEMORY USAGE {used} bytes per identity", target=cells[strategy]))
    return rows


def memory_notes(section: Mapping[str, Any], s: Settings, report: Mapping[str, Any]) -> list[str]:
    runs = section.get("usage_runs", {})
    if not runs:
        return []
    each = "; ".join(f"{strategy} {', '.join(map(str, values))}" for strategy, values in runs.items())
    return [f"MEMORY USAGE per identity: the median of {len(next(iter(runs.values())))} runs ({each} bytes)."]


# --- section 7: end to end ------------------------------------------------------------------------


def end_to_end(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """gunicorn with no limiter, ours and Flask-Limiter: requests per second."""
    server = e2e.ServerSettings(workers=s.workers, threads=s.threads)
    loads = e2e.LoadSettings(rounds=s.e2e_rounds, seconds=s.e2e_seconds, connections=s.e2e_connections)
    try:
        servers = e2e.run(url, e2e.TARGETS, server, loads)
    except (RuntimeError, OSError) as error:
        return {"error": str(error)}
    return {"results": e2e.summarize(servers), "server": asdict(server), "load": asdict(loads)}


def e2e_checks(section: Mapping[str, Any]) -> list[Check]:
    if "results" not in section:
        return []
    return [("ours", "e2e-throughput", section["results"]["ours"]["vs_no_limiter"], None)]


def e2e_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    title = (
        f"7. End to end: gunicorn, {s.workers} gthread workers x {s.threads} threads, {s.e2e_connections} "
        "keep-alive connections; ratio = req/s / no limiter's"
    )
    if "error" in section:
        return [[title], [f"  gunicorn could not be run: {section['error'].splitlines()[0]}"]]
    rows = [[title]]
    for name, r in section["results"].items():
        rps = f"{r['requests_per_second']:.0f}"
        rows.append(row(r["label"], ratio_cell=f"{r['vs_no_limiter']:.2f}x", rps=rps, target=cells.get(name, "")))
    return rows


def e2e_notes(section: Mapping[str, Any], s: Settings, report: Mapping[str, Any]) -> list[str]:
    if "results" not in section:
        return []
    results = section["results"]
    parts = [f"{r['label']} {r['latency_ms_median']:.1f} ms" for r in results.values() if r["latency_ms_median"]]
    errors = sum(r["errors"] for r in results.values())
    return [
        f"End to end: medians of {s.e2e_rounds} rounds of {s.e2e_seconds:g} s per server, load generator "
        f"(Python threads, http.client) on the same {report['environment']['cpus']} CPUs as gunicorn and Redis; "
        f"median latency {', '.join(parts)}; {errors} errors."
    ]


# --- section 8: local:// -------------------------------------------------------------------------


def local_storage(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
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
            variants.append(our_variant(name, label, where, environ, f"rl-{name}:"))
        prepare(variants, environ, s.batch)
        timed = time_and_count(variants, None, s.rounds, s.batch, s.warmup, 0)
        status = local.server_status(folder)
    finally:
        local.find_server_binary = saved
        local.stop_server(folder)
        shutil.rmtree(folder.path, ignore_errors=True)
    results = {name: timed[name] for name in ("ping", "ours-redis", "ours-local")}
    ratio_local = ratio(results["ours-local"]["added_us"], results["ours-redis"]["added_us"])
    return {"results": results, "ratio": ratio_local, "server": f"{status.product} {status.version}"}


def local_checks(section: Mapping[str, Any]) -> list[Check]:
    return [("ours-local", "local-vs-redis", section["ratio"] or 0.0, None)]


def local_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    title = f"8. local:// beside redis:// ({section['server']} for both); ratio = local:// / redis://"
    rows = [[title]]
    for name, r in section["results"].items():
        if name != "ping":
            vs = f"{section['ratio']:.2f}x" if name == "ours-local" else ""
            rows.append(timed_row(r, vs, cells.get(name, ""), counted=False))
    return rows


# --- section 9: Redis Cluster ---------------------------------------------------------------------


def cluster(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours on a throwaway 3-master cluster, beside ours on the single node and
    Flask-Limiter on the same cluster, 3 layers x 2 identities on 2 masters."""
    # The cluster launcher serves the tests and this suite alike, so it lives
    # in tests/servers.py, importable from the repository's root.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    from tests.servers import redis_cluster

    with redis_cluster(masters=3) as nodes:
        masters = [redis.Redis(port=node.port, **client_options()) for node in nodes.masters()]
        try:
            return cluster_section(url, admin, nodes.url, masters, s)
        finally:
            for client in masters:
                client.close()


def two_node_user(cluster_url: str) -> tuple[str, list[str]]:
    """A user whose counters live on another master than :data:`harness.CLIENT_IP`'s,
    and the two masters (``host:port``), as our app on ``cluster_url`` places them."""
    throttle = our_app(cluster_url, "rl-c:").extensions["ratelimit"].throttle
    policy = Policy(parse_limits(SPEC), "index")

    def node(identity: Identity) -> str:
        return str(throttle.storage.nodes([throttle.key(policy, identity)])[0])

    ip_node = node(Identity("ip", CLIENT_IP))
    user = next(user for user in (f"user{i}" for i in range(1000)) if node(Identity("user", user)) != ip_node)
    return user, [ip_node, node(Identity("user", user))]


def cluster_section(
    url: str, admin: redis.Redis, cluster_url: str, masters: Sequence[redis.Redis], s: Settings
) -> dict[str, Any]:
    user, nodes = two_node_user(cluster_url)
    environ = base_environ(CLIENT_IP, user)
    two_nodes = [f"redis://{node}" for node in nodes]
    variants = [
        *yardsticks(url, environ),
        floor_variant([url], environ, "Flask app + 1 PING/request, one node (floor)"),
        floor_variant(two_nodes, environ, "Flask app + 1 PING to each of the 2 nodes, overlapped (floor)", "floor-2"),
        our_variant("single", "ours fixed-window, one node", url, environ, "rl-c-single:"),
        our_variant("cluster", "ours fixed-window, 3-master cluster", cluster_url, environ, "rl-c:"),
        flask_limiter_variant(cluster_url, environ, "fixed-window", "Flask-Limiter fixed-window, same cluster", "fl"),
    ]
    prepare(variants, environ, s.batch)
    time_and_count(variants, None, s.rounds, s.batch, s.warmup, 0)
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
    sent, delta = tally(variant, servers, requests)
    # PING, CLUSTER and COMMAND are redis-py's own.
    ran = {name: d for name, d in delta.items() if name != "ping" and not name.startswith(("cluster", "command"))}
    client = {name: n / requests for name, n in sent.items() if not name.startswith("#")}
    return {
        "requests": requests,
        "client_commands": sum(client.values()),
        "client_by_command": dict(sorted(client.items())),
        "round_trips": sent["#replies"] / requests,
        "server_commands": sum(n for n, _ in ran.values()) / requests,
        "server_by_command": {name: n / requests for name, (n, _) in sorted(ran.items()) if n},
        "server_us_per_request": sum(us for _, us in ran.values()) / requests,
        "script_us_per_request": sum(ran.get(name, (0, 0))[1] for name in CLUSTER_SCRIPTS) / requests,
    }


def cluster_checks(section: Mapping[str, Any]) -> list[Check]:
    results = section["results"]
    return [
        ("cluster", "cluster-vs-single", results["cluster"]["vs_single"] or 0.0, None),
        ("fl", "cluster-flask-limiter-ratio", results["fl"]["vs_ours"] or 0.0, None),
        ("cpu", "cluster-redis-cpu", results["cluster"]["script_vs_single"] or 0.0, None),
    ]


def cluster_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    results = section["results"]
    title = (
        f"9. Redis Cluster, {section['masters']} masters: 3 layers x 2 identities on 2 nodes; ratio = cluster / "
        "one node (Flask-Limiter: / ours on the cluster)"
    )
    rows = [[title]]
    vs = {"floor-2": "vs_single", "cluster": "vs_single", "fl": "vs_ours"}
    for name, r in results.items():
        if name not in ("ping", "bare"):
            rows.append(timed_row(r, times(r[vs[name]]) if name in vs else "", cells.get(name, "")))
    cpu = results["cluster"]["script_vs_single"]
    us = f"{results['cluster']['script_us_per_request']:.1f}"
    rows.append(["  ours, Redis script us per decision: cluster / one node", "", "", f"{cpu or 0.0:.2f}x", "", "",
                 us, "", cells["cpu"]])  # fmt: skip
    return rows


# --- section 10: memory:// -----------------------------------------------------------------------


def embedded(url: str, admin: redis.Redis, s: Settings) -> dict[str, Any]:
    """Ours on ``memory://`` (the embedded store) and Flask-Limiter's
    ``memory://``, admitted requests, interleaved as in section 1-3: no Redis."""
    environ = base_environ()
    variants = [bare_variant(environ)]
    for strategy in OUR_STRATEGIES:
        variants.append(our_variant(f"ours-{strategy}", f"ours {strategy}, memory://", "memory://", environ,
                                    strategy=strategy))  # fmt: skip
    for strategy in FLASK_LIMITER_STRATEGIES:
        variants.append(flask_limiter_variant("memory://", environ, strategy, f"Flask-Limiter {strategy}, memory://"))
    prepare(variants, environ, s.batch)
    results = time_and_count(variants, None, s.rounds, s.batch, s.warmup, 0)
    for strategy, like in LIKE_FOR_LIKE.items():
        ours = results[f"ours-{like}"]
        ours["flask_limiter"] = f"fl-{strategy}"
        ours["vs_flask_limiter"] = ratio(ours["added_us"], results[f"fl-{strategy}"]["added_us"])
    return {"results": results}


def embedded_checks(section: Mapping[str, Any]) -> list[Check]:
    value = section["results"]["ours-fixed-window"]["vs_flask_limiter"] or 0.0
    return [("ours-fixed-window", "memory-vs-flask-limiter", value, None)]


def embedded_rows(section: Mapping[str, Any], s: Settings, cells: Mapping[str, str]) -> list[Row]:
    title = "10. memory://, no Redis: admitted, 3 layers x 2 identities; ratio = ours / Flask-Limiter, like for like"
    rows = [[title]]
    for name, r in section["results"].items():
        if name != "bare":
            rows.append(timed_row(r, times(r.get("vs_flask_limiter")), cells.get(name, ""), counted=False))
    return rows


# --- the targets and the notes --------------------------------------------------------------------


def goal(name: str, value: float, what: str | None = None) -> dict[str, Any]:
    """One target of :data:`harness.TARGETS`: its figure, whether it is met, and
    by what factor it is missed. ``what`` overrides the target's words, for a
    target checked on several pairs."""
    target = TARGETS[name]
    factor = (value / target.bound if target.at_most else target.bound / value) if value > 0 else float("inf")
    return {"name": name, "what": what or target.what, "value": value, "target": target.bound, "unit": target.unit,
            "at_most": target.at_most, "met": target.met(value), "factor": factor}  # fmt: skip


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every target the run's sections check, its figure and whether it is met."""
    sections = report["sections"]
    return [goal(target, value, what) for name, section in sections.items()
            for _row, target, value, what in SECTIONS[name].checks(section)]  # fmt: skip


def target_lines(found: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for t in found:
        relation = "<=" if t["at_most"] else ">="
        state = "MET" if t["met"] else f"MISSED by a factor of {t['factor']:.2f}"
        lines.append(f"{t['what']}: {t['value']:.3g} {t['unit'].strip()} (target {relation} {t['target']:g}): {state}")
    return lines


def notes(report: Mapping[str, Any], s: Settings) -> list[str]:
    """The short notes under the table: how to read it, then each section's."""
    lines = [
        "added us: median over rounds of (app - bare app in the same round), per request; for PING its own time. "
        "x PING: / PING's time in the same section's rounds.",
        "cmds sent: commands redis-py sent per request; Redis cmds: per request from INFO commandstats, "
        "including those scripts run; Redis us: commandstats usec of the commands sent, per request.",
        "Like for like: Flask-Limiter fixed-window ~ ours fixed-window, moving-window ~ sliding-log, "
        "sliding-window-counter ~ sliding-window. Each section times its own rounds: compare within a section.",
    ]
    for name, section in report["sections"].items():
        lines += SECTIONS[name].notes(section, s, report)
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
    floors = ("floor", "round-trip", "canned")
    colours = ["#999999" if n in floors else "#2a7ab9" if n.startswith("ours") else "#d9822b" for n in names]
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
    if args.sections != tuple(SECTIONS):
        command += ["--sections", ",".join(args.sections)]
    return shlex.join(command)


def no_notes(section: Mapping[str, Any], s: Settings, report: Mapping[str, Any]) -> list[str]:
    return []


class Section(NamedTuple):
    """One section: what runs it, what draws its rows, the targets it checks, and its notes."""

    run: Callable[[str, redis.Redis, Settings], dict[str, Any]]
    rows: Callable[[Mapping[str, Any], Settings, Mapping[str, str]], list[Row]]
    checks: Callable[[Mapping[str, Any]], list[Check]]
    notes: Callable[[Mapping[str, Any], Settings, Mapping[str, Any]], list[str]] = no_notes


#: Every section, in the report's order.
SECTIONS = {
    "admitted": Section(admitted, admitted_rows, admitted_checks, admitted_notes),
    "growth": Section(growth, growth_rows, growth_checks, growth_notes),
    "flood": Section(flood, flood_rows, flood_checks, flood_notes),
    "memory": Section(memory, memory_rows, memory_checks, memory_notes),
    "e2e": Section(end_to_end, e2e_rows, e2e_checks, e2e_notes),
    "local": Section(local_storage, local_rows, local_checks),
    "cluster": Section(cluster, cluster_rows, cluster_checks),
    "embedded": Section(embedded, embedded_rows, embedded_checks),
}


def run_sections(url: str, admin: redis.Redis, s: Settings, sections: Sequence[str]) -> dict[str, Any]:
    """Run the chosen sections, in order, each against a flushed Redis."""
    done: dict[str, Any] = {}
    for name in sections:
        admin.flushall()
        started = time.monotonic()
        print(f"  {name}...", file=sys.stderr, flush=True)
        done[name] = SECTIONS[name].run(url, admin, s)
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

    rows: list[Row] = []
    for name, section in sections.items():
        rows += SECTIONS[name].rows(section, s, target_cells(SECTIONS[name].checks(section)))
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
