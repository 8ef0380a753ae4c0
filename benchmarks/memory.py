#!/usr/bin/env python
"""How much Redis memory one client costs, for the limit ``10/s;120/m;240/h``.

On one throwaway ``redis-server``: ours, through the core (``Throttle.hit``,
no Flask), for each of our four strategies, and Flask-Limiter's three, through
``limits`` as Flask-Limiter calls it (one ``hit`` per layer, in its sorted
order). Each after these patterns, every one from ``FLUSHALL``: one request
(``one``), ten at one instant (``burst``), 240 over one hour (``steady``),
and ``used_memory`` growth per client when 1,000 clients send one request
each (``bulk``). ``benchmarks/README.md`` says what each column counts.

The first three sum ``MEMORY USAGE key SAMPLES 0`` over the client's keys,
which must be every key in the database, or the run stops; each is the median
of five runs (``--repeat``), since skiplist levels are random and an
allocator may round a block up more one time than another.

The hour passes on a simulated clock: our scripts take the time as an
argument; Flask-Limiter's moving window reads ``time.time()`` in
``limits.storage.redis``, which is patched; its other strategies read no clock
(their windows are key expiries), so every step of the clock shortens every
key's TTL by as much (``PEXPIRE``, or ``DEL`` when it runs out). All these
scripts use TTLs only relative to now, so they see what real time would show.

Run it from the repository root::

    python benchmarks/memory.py           # about ten seconds: prints a table
    python benchmarks/memory.py --json    # the same figures, and each key's, as JSON
    python benchmarks/memory.py --repeat 1 --identities 100   # a quick smoke test
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import redis
from harness import render_table, version

from flask_redis_throttle import Identity, RefusalLog, parse_limits
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.engine.throttle import Policy, Throttle
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.testing import redis_server

try:
    import limits.storage.redis as limits_redis
    from limits import RateLimitItem, parse_many
    from limits.storage import RedisStorage, storage_from_string
    from limits.strategies import (
        FixedWindowRateLimiter,
        MovingWindowRateLimiter,
        RateLimiter,
        SlidingWindowCounterRateLimiter,
    )
except ImportError:  # a message is kinder than a traceback
    sys.exit('Flask-Limiter is not installed; run: pip install -e ".[test,bench]"')

#: The limit, in each library's spelling.
SPEC = "10/s;120/m;240/h"
LIMITS_SPEC = "10/second;120/minute;240/hour"
#: The client measured, and the scope (endpoint) its counters are kept under.
CLIENT_IP = "192.0.2.7"
SCOPE = "bench"
#: When the simulated clock starts, in microseconds since the epoch: a time
#: with a fraction, so that timestamps stored in Redis are as long as usual.
START_US = 1_800_000_000_123_457
#: Added to Flask-Limiter's clock, which is a float of seconds: most real
#: ``time.time()`` values need 17 significant digits, whole microseconds 16.
SUB_MICROSECOND = 3e-7
#: The steady client: this many requests, this many seconds apart (one hour).
STEADY_REQUESTS = 240
STEADY_INTERVAL = 15
BURST = 10

PATTERNS: dict[str, str] = {
    "one": "1 request",
    "burst": f"burst of {BURST}",
    "steady": f"{STEADY_REQUESTS} in 1 h",
    "bulk": "used_memory/id",
}

FLASK_LIMITER_STRATEGIES: dict[str, type[RateLimiter]] = {
    "fixed-window": FixedWindowRateLimiter,
    "moving-window": MovingWindowRateLimiter,
    "sliding-window-counter": SlidingWindowCounterRateLimiter,
}


class Clock:
    """The simulated time every subject decides at.

    :param client: the Redis whose key expiries follow this clock.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.elapsed_us = 0

    def micros(self) -> int:
        """Now, in microseconds since the epoch: what our scripts are given."""
        return START_US + self.elapsed_us

    def time(self) -> float:
        """Now, in seconds, with the interface of :func:`time.time`: what ``limits`` reads."""
        return self.micros() / 1e6 + SUB_MICROSECOND

    def reset(self) -> None:
        self.elapsed_us = 0

    def advance(self, seconds: float) -> None:
        """Move the clock on, to the millisecond, and every key's expiry with it."""
        step_ms = round(seconds * 1000)
        self.elapsed_us += step_ms * 1000
        keys = list(self.client.scan_iter(count=1000))
        with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(key)
            ttls: list[int] = pipe.execute()
        with self.client.pipeline(transaction=True) as pipe:
            for key, ttl in zip(keys, ttls, strict=True):
                if ttl < 0:  # -2: gone meanwhile; -1: no expiry, so no clock to follow
                    continue
                # A key due exactly now counts as expired: real requests are
                # never on the exact millisecond, and real time only moves on.
                if ttl <= step_ms:
                    pipe.delete(key)
                else:
                    pipe.pexpire(key, ttl - step_ms)
            pipe.execute()


@dataclass
class Subject:
    """A library and strategy, as two functions of a client IP address.

    :param hit: send one request; True if every layer admitted it.
    :param keys: the Redis keys that may hold that client's counters.
    """

    library: str
    strategy: str
    hit: Callable[[str], bool]
    keys: Callable[[str], list[str]]

    @property
    def name(self) -> str:
        return f"{self.library} {self.strategy}"


class PinnedThrottle(Throttle):
    """A throttle that decides at the simulated time instead of Redis ``TIME``."""

    def __init__(self, storage: Storage, clock: Clock) -> None:
        super().__init__(storage)
        self.clock = clock

    def now(self) -> int:
        return self.clock.micros()


def our_subject(url: str, strategy: str, clock: Clock) -> Subject:
    throttle = PinnedThrottle(Storage.from_url(url), clock)
    policy = Policy(parse_limits(SPEC), SCOPE, strategy)

    def hit(ip: str) -> bool:
        return throttle.hit([(policy, [Identity("ip", ip)])]).admitted

    def keys(ip: str) -> list[str]:
        return [throttle.key(policy, Identity("ip", ip))]

    return Subject("flask-redis-throttle", strategy, hit, keys)


def flask_limiter_subject(url: str, strategy: str, client: redis.Redis) -> Subject:
    storage = storage_from_string(url)
    if not isinstance(storage, RedisStorage):
        raise TypeError(f"limits made a {type(storage).__name__} of {url}, not a RedisStorage")
    limiter = FLASK_LIMITER_STRATEGIES[strategy](storage)
    items: list[RateLimitItem] = sorted(parse_many(LIMITS_SPEC))
    prefix = glob_escape(storage.key_prefix)

    def hit(ip: str) -> bool:
        # As Flask-Limiter does: each layer in turn, stopping at the first refusal.
        return all(limiter.hit(item, ip, SCOPE) for item in items)

    def keys(ip: str) -> list[str]:
        # LIMITS:LIMITER/<ip>/<scope>/..., in braces for the sliding window counter.
        pattern = f"{prefix}:*LIMITER/{glob_escape(ip)}/{glob_escape(SCOPE)}/*"
        return sorted(key.decode() for key in client.scan_iter(match=pattern, count=1000))

    return Subject("Flask-Limiter", strategy, hit, keys)


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis ``MATCH`` pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


@dataclass
class Measurement:
    """What one pattern left in Redis for one subject."""

    requests: int
    admitted: int
    key_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.key_bytes.values())


def measure_keys(client: redis.Redis, subject: Subject, ip: str, requests: int, admitted: int) -> Measurement:
    """Sum ``MEMORY USAGE`` over the identity's keys, checking they are all the keys there are."""
    key_bytes: dict[str, int] = {}
    for key in subject.keys(ip):
        usage = client.memory_usage(key, samples=0)  # 0: every element, not a sample
        if usage is not None:  # our layers' keys that do not exist (yet, or any more)
            key_bytes[key] = usage
    everything = {key.decode() for key in client.scan_iter(count=1000)}
    if everything != set(key_bytes):
        raise RuntimeError(f"{subject.name}: the database holds {sorted(everything)}, but we found {sorted(key_bytes)}")
    return Measurement(requests, admitted, key_bytes)


def one_request(client: redis.Redis, subject: Subject, clock: Clock) -> Measurement:
    admitted = subject.hit(CLIENT_IP)
    return measure_keys(client, subject, CLIENT_IP, 1, int(admitted))


def burst(client: redis.Redis, subject: Subject, clock: Clock) -> Measurement:
    admitted = sum(subject.hit(CLIENT_IP) for _ in range(BURST))
    return measure_keys(client, subject, CLIENT_IP, BURST, admitted)


def steady(client: redis.Redis, subject: Subject, clock: Clock) -> Measurement:
    admitted = 0
    for n in range(STEADY_REQUESTS):
        if n:
            clock.advance(STEADY_INTERVAL)
        admitted += subject.hit(CLIENT_IP)
    return measure_keys(client, subject, CLIENT_IP, STEADY_REQUESTS, admitted)


def bulk(client: redis.Redis, subject: Subject, identities: int) -> dict[str, Any]:
    """``used_memory`` growth per identity when ``identities`` clients send one request each."""
    subject.hit("198.51.100.1")  # load the scripts and open the connection first
    client.flushall()
    before = used_memory(client)
    admitted = sum(subject.hit(f"198.18.{n // 256}.{n % 256}") for n in range(identities))
    after = used_memory(client)
    growth = after - before
    return {
        "identities": identities,
        "admitted": admitted,
        "keys": client.dbsize(),
        "growth": growth,
        "bytes_per_identity": growth / identities,
    }


def used_memory(client: redis.Redis) -> int:
    # Let serverCron finish any incremental rehash of the keyspace dicts, which
    # holds both tables while it lasts.
    time.sleep(0.25)
    value: int = client.info("memory")["used_memory"]
    return value


PatternRun = Callable[[redis.Redis, Subject, Clock], Measurement]
KEYED_PATTERNS: dict[str, PatternRun] = {"one": one_request, "burst": burst, "steady": steady}


def run_subject(client: redis.Redis, subject: Subject, clock: Clock, repeat: int, identities: int) -> dict[str, Any]:
    result: dict[str, Any] = {"library": subject.library, "strategy": subject.strategy}
    for name, run in KEYED_PATTERNS.items():
        # The same requests at the same simulated times do not always give the
        # same sizes: skiplist levels are random, and an allocator may hand out
        # a block larger than asked for. So each figure is the median run's.
        runs = []
        for _ in range(repeat):
            client.flushall()
            clock.reset()
            runs.append(run(client, subject, clock))
        runs.sort(key=lambda measurement: measurement.total)
        median = runs[len(runs) // 2]
        result[name] = {
            "bytes": median.total,
            "keys": median.key_bytes,
            "min": runs[0].total,
            "max": runs[-1].total,
            "requests": median.requests,
            "admitted": min(measurement.admitted for measurement in runs),
        }
    client.flushall()
    clock.reset()
    result["bulk"] = bulk(client, subject, identities)
    client.flushall()
    return result


@contextmanager
def flask_limiter_clock(clock: Clock) -> Iterator[None]:
    """Make ``limits``' Redis storage read the simulated clock for ``time.time()``."""
    with mock.patch.object(limits_redis, "time", clock):
        yield


def notes(results: list[dict[str, Any]], repeat: int) -> list[str]:
    found = [
        f"bytes = MEMORY USAGE (SAMPLES 0) summed over the identity's keys, median of {repeat} runs "
        "(--json has the spread); (n) = its number of keys",
        f"'{PATTERNS['steady']}': one request every {STEADY_INTERVAL} s on a simulated clock, measured after the last",
        "simulated time: ours via Throttle.now(); Flask-Limiter's moving window via limits' time.time(); "
        "every strategy's key expiry by shortening all TTLs as the clock advances",
        "used_memory/id also counts the keyspace and expiry dicts and the allocator's rounding, and not the "
        "integers below 10,000 that Redis shares (such as Flask-Limiter's counters)",
    ]
    for result in results:
        for name in KEYED_PATTERNS:
            pattern = result[name]
            if pattern["admitted"] != pattern["requests"]:
                found.append(
                    f"{result['library']} {result['strategy']}: only {pattern['admitted']} of "
                    f"{pattern['requests']} requests admitted in '{PATTERNS[name]}'"
                )
    return found


def table(results: list[dict[str, Any]]) -> str:
    rows = []
    for result in results:
        cells = [result["library"], result["strategy"]]
        cells += [f"{result[name]['bytes']:,} ({len(result[name]['keys'])})" for name in KEYED_PATTERNS]
        rows.append([*cells, f"{result['bulk']['bytes_per_identity']:,.0f}"])
    return render_table(["library", "strategy", *PATTERNS.values()], rows, left=2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=f"Redis memory per client for the limit {SPEC}, ours against Flask-Limiter's.",
    )
    parser.add_argument("--json", action="store_true", help="print the results, every key's size too, as JSON")
    parser.add_argument(
        "--identities",
        type=int,
        default=1000,
        metavar="N",
        help="distinct clients in the used_memory pattern (default 1000)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        metavar="N",
        help="runs of each of the other patterns; the median is reported (default 5)",
    )
    args = parser.parse_args(argv)
    if args.identities < 1 or args.repeat < 1:
        parser.error("--identities and --repeat must be at least 1")
    return args


#: Refusals written to measure the refusal log, each with an IP and a user.
REFUSALS = 1000


def refusal_log_bytes(client: redis.Redis) -> int:
    """``MEMORY USAGE`` of a refusal log holding :data:`REFUSALS` typical entries."""
    client.flushall()
    log = RefusalLog(client, "rl:refusals", REFUSALS)
    for i in range(REFUSALS):
        ip = f"ip:203.0.113.{i % 250}"
        log.record(
            endpoint="api.items",
            scope="api.items",
            layer="10/1s",
            strategy="sliding-window",
            identity=ip,
            identities=[ip, f"user:{10_000 + i}"],
            retry_after=0.734,
        )
    size = client.memory_usage(log.key, samples=0)
    if size is None:
        raise RuntimeError(f"{log.key} is missing after {REFUSALS} refusals were written")
    client.flushall()
    return int(size)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    with redis_server() as server:
        client = redis.Redis.from_url(server.url)
        clock = Clock(client)
        subjects = [our_subject(server.url, strategy, clock) for strategy in STRATEGIES]
        subjects += [flask_limiter_subject(server.url, strategy, client) for strategy in FLASK_LIMITER_STRATEGIES]
        with flask_limiter_clock(clock):
            results = [run_subject(client, subject, clock, args.repeat, args.identities) for subject in subjects]
        log_bytes = refusal_log_bytes(client)
        server_info = client.info("server")
        allocator = client.info("memory")["mem_allocator"]
        client.close()
    report: dict[str, Any] = {
        "spec": SPEC,
        "client_ip": CLIENT_IP,
        "scope": SCOPE,
        "patterns": PATTERNS,
        "redis": {"version": server_info["redis_version"], "mem_allocator": allocator},
        "versions": {package: version(package) for package in ("flask-redis-throttle", "limits", "flask-limiter")},
        "results": results,
        "repeat": args.repeat,
        "refusal_log": {"entries": REFUSALS, "bytes": log_bytes},
        "notes": notes(results, args.repeat),
        "seconds": round(time.monotonic() - started, 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"Redis memory per client for {SPEC} (redis-server {server_info['redis_version']}, allocator {allocator})")
    print()
    print(table(results))
    print()
    for note in report["notes"]:
        print(f"* {note}")
    print(f"* refusal log: {REFUSALS:,} entries (an IP and a user each) take {log_bytes:,} bytes")
    print(f"* {args.identities:,} identities in '{PATTERNS['bulk']}'; {report['seconds']} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
