#!/usr/bin/env python
"""Shaping and the outbound limiter, measured on a throwaway ``redis-server``
(see docs/shaping.rst).

Three sections:

``outbound``
    ``--processes`` processes share one :class:`SharedQuota` of ``--quota``
    (burst 1), each calling ``acquire()`` in a loop for ``--seconds``. Each
    call's *turn* is the moment the script gave it, on Redis's clock (the
    same clock as this host's: Redis runs here): the time it was decided
    at plus the wait the script replied. Checks: the turns are spread at the
    quota's rate (the gaps between consecutive turns, beside window /
    quota); no window of the quota's length holds more than the quota; the
    achieved rate is within 5 % of the quota. It also reports how late the
    processes woke up after their turn (their scheduler's delay, which the
    limiter does not control).

    To know each turn to the microsecond, the processes' throttles send
    their own clock reading as the script's time (:class:`Clocked`, the
    way tests pin time) rather than let the script read Redis ``TIME``: on
    this host both are the same clock, and the script's arithmetic is the
    same; only the moment of each decision is then known exactly rather
    than to within a round trip that a busy scheduler can stretch.

``bursts``
    Requests arrive in bursts (:data:`BURSTS`: from 2 to 16 at once, each
    spread over the processes, on clocked throttles too) at a limit of ``10/s`` with a delay of 500 ms, the script
    a shaped view runs: which are admitted at once, which wait and how long,
    which are refused. Checks: no wait passes the delay, and no window of a
    second holds more than 10 turns. The plot in docs/shaping.rst is drawn
    from this section of the JSON (``python docs/plot_shaping.py``).

``decision``
    The time of one decision (``Throttle.hit``, the script call a view makes,
    without the sleep) in one process: a plain GCRA limit, the same limit
    with a delay that never has to wait, and one with a delay whose every
    request reserves a later turn; interleaved batches, medians over rounds,
    and the ratios to the plain one.

Run it from the repository root::

    python benchmarks/shaping.py                      # about 1.5 minutes
    python benchmarks/shaping.py --seconds 10         # a quick look
    python benchmarks/shaping.py --json benchmarks/results/shaping.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask_redis_throttle import Identity, parse_limits
from flask_redis_throttle.core.engine.outbound import SharedQuota
from flask_redis_throttle.core.engine.throttle import Policy, Throttle
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.testing import redis_server

BURST_LIMIT, BURST_DELAY = "10/s", 0.5
#: The bursts: (seconds from the start, requests sent then, at once).
BURSTS = [(0.0, 8), (0.6, 4), (2.0, 12), (2.3, 3), (4.0, 5), (5.0, 16), (6.6, 2), (7.0, 6)]


class Clocked(Throttle):
    """A throttle whose script decides at the time it reads, and keeps it."""

    sent = 0

    def now(self) -> int:
        self.sent = time.time_ns() // 1000
        return self.sent


def _outbound_worker(url: str, quota: str, seconds: float, start: Any, out: Any) -> None:
    storage = Storage.from_url(url)
    throttle = Clocked(storage)
    shared = SharedQuota(throttle, quota, scope="bench-outbound")
    calls = []
    until = started(start, out) + seconds
    while time.time() < until:
        wait = shared.acquire()
        calls.append((throttle.sent, round(wait * 1e6), time.time()))
    storage.close()
    out.put(calls)


def most_in_window(times: list[int], window: int) -> int:
    """The most of the sorted ``times`` in any span [t, t + window), in
    whole microseconds: the script's own unit, so no rounding blurs a
    boundary."""
    most, first = 0, 0
    for last, moment in enumerate(times):
        while times[first] <= moment - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def started(start: Any, out: Any) -> float:
    """In a worker: say it is ready, and return the moment every worker
    starts at, once the main process has set it."""
    out.put("ready")
    while start.value == 0:
        time.sleep(0.01)
    time.sleep(max(0.0, start.value - time.time()))
    return float(start.value)


def run_processes(target: Any, args_of: list[tuple[Any, ...]]) -> tuple[float, list[Any]]:
    """Run ``target(*args, start, out)`` in a process per ``args``, start
    them all at one moment once every one is ready (spawning and importing
    take seconds on a busy machine), and return that moment and what each
    put on ``out``."""
    context = multiprocessing.get_context("spawn")
    out, start = context.Queue(), context.Value("d", 0.0)
    processes = [context.Process(target=target, args=(*args, start, out)) for args in args_of]
    for process in processes:
        process.start()
    for _ in processes:
        assert out.get(timeout=120) == "ready"
    start.value = moment = time.time() + 0.5
    results = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join(30)
    return moment, results


def outbound(url: str, processes: int, quota: str, seconds: float) -> dict[str, Any]:
    [layer] = parse_limits(quota)
    _, got = run_processes(_outbound_worker, [(url, quota, seconds)] * processes)
    calls = sorted(call for calls in got for call in calls)
    turns = sorted(sent + wait for sent, wait, _ in calls)  # microseconds
    window = layer.window * 1_000_000
    gaps = sorted(b - a for a, b in itertools.pairwise(turns))
    rate = (len(turns) - 1) / (turns[-1] - turns[0]) * 1e6
    woken = sorted(round(woke * 1e6) for _, _, woke in calls)
    late = sorted(woke * 1e6 - (sent + wait) for sent, wait, woke in calls)
    return {
        "quota": quota,
        "processes": processes,
        "seconds": seconds,
        "calls": len(turns),
        "interval_s": layer.window / layer.quota,
        "gap_median_s": statistics.median(gaps) / 1e6,
        "gap_min_s": gaps[0] / 1e6,
        "gap_max_s": gaps[-1] / 1e6,
        "rate_per_s": rate,
        "quota_rate_per_s": layer.quota / layer.window,
        "rate_error": rate / (layer.quota / layer.window) - 1,
        "most_in_window": most_in_window(turns, window),
        "most_in_window_woken": most_in_window(woken, window),
        "late_median_s": statistics.median(late) / 1e6,
        "late_p99_s": late[int(len(late) * 0.99)] / 1e6,
    }


def _burst_worker(url: str, number: int, processes: int, start: Any, out: Any) -> None:
    storage = Storage.from_url(url)
    throttle = Clocked(storage)
    policy = Policy(parse_limits(BURST_LIMIT), "bench-bursts", "gcra", delay=BURST_DELAY, burst=1)
    who = (Identity("ip", "192.0.2.1"),)
    seen = []
    first = started(start, out)
    for moment, count in BURSTS:
        time.sleep(max(0.0, first + moment - time.time()))
        # This process's share of the burst.
        for _ in range(count // processes + (1 if number < count % processes else 0)):
            decision = throttle.hit([(policy, who)])
            seen.append((throttle.sent, decision.admitted, round(decision.retry_after * 1e6)))
    storage.close()
    out.put(seen)


def bursts(url: str, processes: int) -> dict[str, Any]:
    start, got = run_processes(_burst_worker, [(url, number, processes) for number in range(processes)])
    seen = sorted(event for events in got for event in events)
    turns = sorted(sent + wait for sent, admitted, wait in seen if admitted)  # microseconds
    [layer] = parse_limits(BURST_LIMIT)
    zero = round(start * 1e6)
    return {
        "limit": BURST_LIMIT,
        "delay_s": BURST_DELAY,
        "processes": processes,
        "bursts": BURSTS,
        "requests": len(seen),
        "admitted_at_once": sum(1 for _, admitted, wait in seen if admitted and wait == 0),
        "delayed": sum(1 for _, admitted, wait in seen if admitted and wait > 0),
        "refused": sum(1 for _, admitted, _ in seen if not admitted),
        "longest_wait_s": max(wait for _, admitted, wait in seen if admitted) / 1e6,
        "most_in_window": most_in_window(turns, layer.window * 1_000_000),
        # Each request: seconds from the first burst to its decision,
        # whether it was admitted, and its wait in seconds.
        "events": [((sent - zero) / 1e6, admitted, wait / 1e6) for sent, admitted, wait in seen],
    }


def decision(url: str, rounds: int, batch: int) -> dict[str, Any]:
    storage = Storage.from_url(url)
    throttle = Throttle(storage)
    who = (Identity("ip", "192.0.2.9"),)
    variants = {
        "plain": Policy(parse_limits("1000000/s"), "bench-plain", "gcra"),
        "delay, no wait": Policy(parse_limits("1000000/s"), "bench-shaped", "gcra", delay=0.5, burst=1000000),
        # One a second, a delay far off: every request reserves a later turn.
        "delay, reserving": Policy(parse_limits("1/s"), "bench-reserving", "gcra", delay=4_000_000, burst=1),
    }
    for policy in variants.values():
        throttle.hit([(policy, who)])
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for number in range(rounds):
        order = list(variants.items())
        order = order[number % len(order) :] + order[: number % len(order)]
        for name, policy in order:
            checks = [(policy, who)]
            started = time.perf_counter()
            for _ in range(batch):
                throttle.hit(checks)
            samples[name].append((time.perf_counter() - started) / batch * 1e6)
    storage.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "rounds": rounds,
        "batch": batch,
        "median_us": medians,
        "ratio_to_plain": {name: value / medians["plain"] for name, value in medians.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4, help="processes sharing the quota (default 4)")
    parser.add_argument("--quota", default="20/s", help="the outbound quota (default 20/s)")
    parser.add_argument("--seconds", type=float, default=60, help="how long the outbound run lasts (default 60)")
    parser.add_argument("--rounds", type=int, default=30, help="decision rounds (default 30)")
    parser.add_argument("--batch", type=int, default=200, help="decisions per variant per round (default 200)")
    parser.add_argument("--sections", default="outbound,bursts,decision", help="which sections to run")
    parser.add_argument("--json", type=Path, help="write the results here")
    options = parser.parse_args()
    sections = set(options.sections.split(","))
    results: dict[str, Any] = {
        "environment": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": multiprocessing.cpu_count(),
        },
    }
    met = True
    with redis_server() as server:
        if "outbound" in sections:
            found = results["outbound"] = outbound(server.url, options.processes, options.quota, options.seconds)
            [layer] = parse_limits(options.quota)
            checks = {
                "no window over the quota": found["most_in_window"] <= layer.quota,
                "rate within 5 % of the quota": abs(found["rate_error"]) <= 0.05,
                "median gap within 5 % of window / quota": abs(found["gap_median_s"] / found["interval_s"] - 1) <= 0.05,
            }
            print(f"outbound: {found['calls']} calls by {options.processes} processes under {options.quota}")
            print(
                f"  rate {found['rate_per_s']:.3f}/s for {found['quota_rate_per_s']:.3f}/s ({found['rate_error']:+.2%})"
            )
            print(f"  gaps: median {found['gap_median_s'] * 1e3:.2f} ms, min {found['gap_min_s'] * 1e3:.2f} ms")
            print(f"  most turns in a window: {found['most_in_window']} (woken: {found['most_in_window_woken']})")
            print(f"  woke late: median {found['late_median_s'] * 1e3:.2f} ms, p99 {found['late_p99_s'] * 1e3:.2f} ms")
            met = report(checks) and met
        if "bursts" in sections:
            found = results["bursts"] = bursts(server.url, options.processes)
            checks = {
                "no wait past the delay": found["longest_wait_s"] <= BURST_DELAY,
                "no window over the quota": found["most_in_window"] <= 10,
            }
            print(f"bursts: {found['requests']} requests in {len(BURSTS)} bursts, {BURST_LIMIT}", end="")
            print(f" with a delay of {BURST_DELAY} s")
            print(f"  at once {found['admitted_at_once']}, delayed {found['delayed']}, refused {found['refused']}")
            print(f"  longest wait {found['longest_wait_s'] * 1e3:.1f} ms", end="")
            print(f", most turns in a second {found['most_in_window']}")
            met = report(checks) and met
        if "decision" in sections:
            found = results["decision"] = decision(server.url, options.rounds, options.batch)
            print(f"decision ({options.rounds} rounds x {options.batch}), median us per decision:")
            for name, value in found["median_us"].items():
                print(f"  {name:18} {value:8.1f} us  x{found['ratio_to_plain'][name]:.2f}")
    if options.json:
        options.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if met else 1


def report(checks: dict[str, bool]) -> bool:
    for name, ok in checks.items():
        print(f"  {'MET' if ok else 'MISSED'}: {name}")
    return all(checks.values())


if __name__ == "__main__":
    sys.exit(main())
