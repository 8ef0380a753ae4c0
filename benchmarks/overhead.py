#!/usr/bin/env python
"""How much time a rate limiter adds to a Flask request, against one Redis PING.

One process, one throwaway ``redis-server`` (started on a free loopback port by
:func:`flask_redis_throttle.testing.redis_server`), and these variants, timed
in the same interleaved rounds: ``ping`` (one bare redis-py ``PING``: the
yardstick), ``bare`` (the Flask app, no limiter), ``floor`` (the app plus one
``PING`` in a ``before_request`` hook: the least any Redis-backed limiter
adds), ``ours`` (``@limit(SPEC, identities=["ip", user_key])``), ``ours-py``
(the same, Redis's reply canned: our Python alone), with ``--metrics``
``ours-m`` and ``ours-py-m`` (both with Prometheus metrics on), with
``--split`` ``round-trip`` (an empty script's call from a hook: see
:func:`harness.split`), and ``fl-*``
(Flask-Limiter, once per strategy). Every limit has three layers and two
identities, with quotas so large that every request is admitted: this
measures the price of the common case.

The apps, variants, timing (paired by round with the bare app) and command
counting are ``harness.py``'s, shared with ``suite.py``; ``benchmarks/README.md``
says how they work. Run it from the repository root::

    python benchmarks/overhead.py                  # about a minute
    python benchmarks/overhead.py --quick          # a few seconds: a smoke test
    python benchmarks/overhead.py --rounds 600 --json overhead.json
    python benchmarks/overhead.py --profile 3000   # and cProfile our requests
    python benchmarks/overhead.py --metrics        # and the cost of Prometheus metrics
    python benchmarks/overhead.py --split          # and ours split: round trip, script, Python
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shlex
import statistics
import sys
import time
from typing import Any

import redis
from harness import (
    CLIENT_IP,
    FLASK_LIMITER_SPEC,
    FLASK_LIMITER_STRATEGIES,
    SPEC,
    TARGET_PINGS,
    TARGETS,
    Environ,
    Variant,
    base_environ,
    breakdown,
    canned_variant,
    client_options,
    describe,
    flask_limiter_variant,
    floor_variant,
    fmt,
    fmt_count,
    our_variant,
    paired,
    parser_name,
    prepare,
    quartiles,
    ratio,
    render_table,
    round_trip_variant,
    single_pings,
    split,
    time_and_count,
    yardsticks,
)
from harness import environment as harness_environment

from flask_redis_throttle.testing import redis_server

#: The most Prometheus metrics may add, as a share of our added time.
METRICS_TARGET = 0.03

DEFAULTS = {"rounds": 300, "batch": 40, "warmup": 5, "count": 200}
QUICK = {"rounds": 10, "batch": 20, "warmup": 2, "count": 50}


# --- the variants ---------------------------------------------------------------------------------


def build_variants(
    url: str, environ: Environ, strategies: tuple[str, ...], metrics: bool = False, split: bool = False
) -> list[Variant]:
    variants = [*yardsticks(url, environ), floor_variant([url], environ, "Flask app + 1 PING/request")]
    variants += [our_variant("ours", "flask-redis-throttle", url, environ, "rl:"), canned_variant(url, environ)]
    if metrics:
        from prometheus_client import CollectorRegistry  # the prometheus extra: only for --metrics

        variants += [
            our_variant("ours-m", "ours + Prometheus metrics", url, environ, "rl-m:", metrics=CollectorRegistry()),
            canned_variant(url, environ, "ours-py-m", "canned + Prometheus metrics", metrics=CollectorRegistry()),
        ]
    if split:
        variants.append(round_trip_variant(url, environ))
    variants += [flask_limiter_variant(url, environ, strategy) for strategy in strategies]
    return variants


# --- measuring ------------------------------------------------------------------------------------


def metrics_alone(variants: list[Variant], rounds: int, calls: int = 2000) -> list[float]:
    """The work metrics add to one decision, timed alone, in microseconds per
    round: what ``before_request`` runs when they are on (two clock reads,
    the outcome, one counter increment and one histogram observation), on a
    real decision of ``ours``. Beside a round trip to Redis, its few
    microseconds are lost in the noise of ``ours-m - ours``; here they are not."""
    from time import perf_counter

    from prometheus_client import CollectorRegistry

    from flask_redis_throttle import Identity
    from flask_redis_throttle._ops.metrics import Metrics
    from flask_redis_throttle._request.decisions import outcome_label

    app = next(v.app for v in variants if v.name == "ours")
    state = app.extensions["ratelimit"]  # type: ignore[union-attr]
    policy = state.plan("index", "GET").unresolved[0][0]
    decision = state.throttle.hit([(policy, [Identity("ip", CLIENT_IP)])], 0)  # inspects: counts nothing
    metrics = Metrics(CollectorRegistry())
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            started = perf_counter()
            metrics.decided("index", "index", outcome_label(decision, False), perf_counter() - started)
        samples.append((time.perf_counter_ns() - start) / calls / 1000)
    return samples


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


def summarize(
    variants: list[Variant], results: dict[str, dict[str, Any]], alone: list[float] | None
) -> dict[str, dict[str, Any]]:
    """To :func:`harness.figures`' ``results``, add ours against its target, the
    floor, its metered twins (and ``alone``, :func:`metrics_alone`'s samples)
    and Flask-Limiter."""
    by_name = {v.name: v for v in variants}
    for variant in variants:
        results[variant.name]["per_call_us_quartiles"] = quartiles(variant.samples)
    ours = results["ours"]
    ours["target_pings"] = TARGET_PINGS
    ours["meets_target"] = TARGETS["ours-fixed-window"].met(ours["added_pings"])
    ours["added_floors"] = ours["added_us"] / results["floor"]["added_us"]
    for metered, plain in (("ours-m", "ours"), ("ours-py-m", "ours-py")):
        if metered in by_name and plain in by_name:
            # Paired by round, as added time is: the two ran side by side.
            cost = paired(by_name[metered].samples, by_name[plain].samples)
            results[metered]["metrics_us"] = statistics.median(cost)
            results[metered]["metrics_us_quartiles"] = quartiles(cost)
            results[metered]["metrics_share"] = statistics.median(cost) / ours["added_us"]
    if alone is not None:
        results["ours-m"]["metrics_alone_us"] = statistics.median(alone)
        results["ours-m"]["metrics_alone_quartiles"] = quartiles(alone)
        results["ours-m"]["metrics_alone_share"] = statistics.median(alone) / ours["added_us"]
    for name, entry in results.items():
        if name.startswith("fl-"):
            entry["vs_ours"] = ratio(entry["added_us"], ours["added_us"])
    parts = split(variants, "ours")
    if parts is not None:
        ours["split_us"] = parts
    return results


HEADERS = ("variant", "us/call", "added us", "IQR", "added/PING", "target", "vs ours", "cmds sent", "round trips",
           "srv EVALSHA", "srv cmds", "srv us/script", "keys")  # fmt: skip


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, r in results.items():
        iqr = r.get("added_us_quartiles")
        target = f"<={TARGET_PINGS:g}x " + ("met" if r["meets_target"] else "MISSED") if name == "ours" else ""
        rows.append(
            (
                ("  " if name.startswith("ours-") else "") + r["label"],
                fmt(r["per_call_us"]),
                fmt(r.get("added_us")),
                f"{iqr[0]:.0f}..{iqr[1]:.0f}" if iqr else "",
                f"{r['added_pings']:.2f}x" if "added_pings" in r else "-",
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
    return render_table(HEADERS, rows)


LEGEND = """\
us/call: median over rounds of the mean time of one call. added us: median over rounds of (this app - the
bare app, in the same round); IQR: its interquartile range. added/PING: added us / PING us/call. vs ours:
Flask-Limiter's added us / ours. cmds sent: commands redis-py sent per request; round trips: replies it read
per request. srv EVALSHA, srv cmds: per request, from INFO commandstats deltas, which also count the commands
that scripts run (GET, SET, TIME...). srv us/script: Redis's own time per script call. keys: the variant's
counters in Redis after the run."""


def reproduce_command(args: argparse.Namespace) -> str:
    command = ["python", "benchmarks/overhead.py"]
    for option in ("rounds", "batch", "warmup", "count"):
        command += [f"--{option}", str(getattr(args, option))]
    if args.strategies != FLASK_LIMITER_STRATEGIES:
        command += ["--strategies", ",".join(args.strategies)]
    for flag in ("metrics", "split"):
        if getattr(args, flag):
            command.append(f"--{flag}")
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
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="also time ours with Prometheus metrics on (ours-m, ours-py-m): their cost per request",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="also time an empty script's call from a hook (round-trip): "
        "ours' added time split into our Python, the round trip and the script",
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
        variants = build_variants(server.url, environ, args.strategies, args.metrics, args.split)
        prepare(variants, environ, args.batch)
        parsers = {v.name: parser_name(v.client) for v in variants if v.client is not None}
        print(
            f"redis-server {server_version} on 127.0.0.1:{server.port}; {len(variants)} variants x "
            f"{args.rounds} rounds x {args.batch} calls, interleaved (+{args.warmup} warm-up rounds)...",
            file=sys.stderr,
        )
        timed = time_and_count(variants, admin, args.rounds, args.batch, args.warmup, args.count, keys=True)
        results = summarize(variants, timed, metrics_alone(variants, args.rounds) if args.metrics else None)
        ping_single = single_pings(variants[0].client, max(1000, args.rounds * 10))  # type: ignore[arg-type]
        profiled = None
        if args.profile:
            profiled = profile(next(v for v in variants if v.name == "ours"), args.profile)
    elapsed = time.monotonic() - started

    environment = harness_environment(server_version, parsers)
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
        + describe(environment)
    )
    print()
    print(table(results))
    print()
    print(LEGEND)
    print()
    print("Commands per request, by name, as sent by redis-py and as run by Redis:")
    print(breakdown(list(results.values())))
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
    if "split_us" in ours:
        parts = ours["split_us"]
        print(
            f"Ours split, paired by round: the round trip of an empty script's call {parts['round_trip']:.1f} us "
            f"(round-trip), our script over it {parts['script']:.1f} us (ours - ours-py - round-trip), our Python "
            f"{parts['python']:.1f} us (ours-py); in PINGs "
            + " + ".join(f"{parts[part] / ping:.2f}" for part in ("round_trip", "script", "python"))
            + "."
        )
    print(f"A PING timed alone: median {ping_single:.1f} us (the table's PING is the mean over a batch).")
    if "metrics_alone_us" in results.get("ours-m", {}):
        entry = results["ours-m"]
        low, high = entry["metrics_alone_quartiles"]
        share = entry["metrics_alone_share"]
        met = "met" if share < METRICS_TARGET else "MISSED"
        print(
            f"Prometheus metrics' own work per decision, timed alone: {entry['metrics_alone_us']:.2f} us "
            f"(IQR {low:.2f}..{high:.2f}) = {share:.1%} of ours' added time "
            f"({ours['added_us']:.1f} us); target < {METRICS_TARGET:.0%}: {met}."
        )
    for name in ("ours-m", "ours-py-m"):
        if "metrics_us" in results.get(name, {}):
            entry = results[name]
            low, high = entry["metrics_us_quartiles"]
            print(
                f"Prometheus metrics ({name} - {name[:-2]}, paired by round) cost {entry['metrics_us']:.2f} us "
                f"(IQR {low:.2f}..{high:.2f}) = {entry['metrics_share']:.1%} of ours' added time; "
                f"target < {METRICS_TARGET:.0%}: {'met' if entry['metrics_share'] < METRICS_TARGET else 'MISSED'}."
            )
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
        }
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
