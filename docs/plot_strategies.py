"""Draw how each strategy treats the same traffic, for docs/algorithms.rst.

Every decision comes from the real Lua scripts, run on the embedded
``memory://`` store with the scripts' clock pinned, so the plots show what the
package does rather than a model of it. Nothing is random: the same scripts
always give the same pictures and the same numbers.

    python docs/plot_strategies.py

writes ``docs/_static/strategies-bursty.png`` and
``docs/_static/strategies-steady.png`` and prints a summary per strategy.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from flask_redis_throttle import Identity, parse_limits
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.engine.throttle import Policy, Throttle
from flask_redis_throttle.core.storages.storage import Storage

LIMIT = "10/m"
QUOTA = 10
WINDOW = 60  # seconds
DURATION = 240  # seconds shown
#: A whole minute, so that t = 0 on the plots is a fixed-window boundary.
EPOCH = 1_800_000_000
#: Requests within one burst are this far apart, in milliseconds.
BURST_SPACING_MS = 20
OUTPUT = Path(__file__).parent / "_static"

#: (moment in seconds, number of requests sent then, one after another).
SCENARIOS: dict[str, list[tuple[float, int]]] = {
    # Bursts just before and just after the minute boundary at 60 s, then
    # more later on, while the earlier ones are still (or no longer) counted.
    "bursty": [(57, 15), (63, 15), (118, 15), (125, 15), (160, 5), (200, 15)],
    # One request every 3 seconds, 20 a minute against a quota of 10, from a
    # client whose first request is not on a minute boundary.
    "steady": [(20 + 3 * i, 1) for i in range(74)],
}


class Pinned(Throttle):
    """A throttle whose scripts decide at :attr:`at` instead of Redis ``TIME``."""

    at = EPOCH * 10**6

    def now(self) -> int:
        return self.at


@dataclass(frozen=True)
class Event:
    """One request: when it came (seconds), which burst it was in, and the verdict."""

    time: float
    burst: int
    admitted: bool
    retry_after: float


def simulate(throttle: Pinned, scenario: str, strategy: str) -> list[Event]:
    """Send the scenario's requests, in order, to a fresh counter of ``strategy``."""
    policy = Policy(parse_limits(LIMIT), f"{scenario}-{strategy}", strategy)
    identity = [Identity("ip", "192.0.2.1")]
    events = []
    for burst, (moment, count) in enumerate(SCENARIOS[scenario]):
        for n in range(count):
            offset_ms = round(moment * 1000) + n * BURST_SPACING_MS
            throttle.at = EPOCH * 10**6 + offset_ms * 1000
            decision = throttle.hit([(policy, identity)])
            events.append(Event(offset_ms / 1000, burst, decision.admitted, decision.retry_after))
    return events


def trailing(admitted: list[float], t: float) -> int:
    """How many of the sorted times ``admitted`` lie in (t - WINDOW, t]."""
    return bisect.bisect_right(admitted, t) - bisect.bisect_right(admitted, t - WINDOW)


def most_in_window(admitted: list[float]) -> int:
    """The most admitted requests in any span (t - WINDOW, t]; it peaks at an admission."""
    return max((trailing(admitted, t) for t in admitted), default=0)


def summarize(events: list[Event]) -> tuple[int, int, int, float]:
    """Admitted, refused, the most admitted in any window, the longest Retry-After."""
    admitted = [e.time for e in events if e.admitted]
    refused = [e for e in events if not e.admitted]
    longest = max((e.retry_after for e in refused), default=0.0)
    return len(admitted), len(refused), most_in_window(admitted), longest


def draw(scenario: str, results: dict[str, list[Event]], path: Path) -> None:
    """One row per strategy: the trailing count, admitted and refused requests."""
    deepest = max(
        sum(1 for e in events if not e.admitted and e.burst == burst)
        for events in results.values()
        for burst in range(len(SCENARIOS[scenario]))
    )
    figure, axes = plt.subplots(len(results), 1, figsize=(11, 2.3 * len(results) + 1), sharex=True)
    for ax, (strategy, events) in zip(axes, results.items(), strict=True):
        admitted = [e.time for e in events if e.admitted]
        grid = [i / 10 for i in range(DURATION * 10 + 1)]
        ax.step(grid, [trailing(admitted, t) for t in grid], where="post", color="tab:blue", lw=1.5)
        ax.plot(admitted, [trailing(admitted, t) for t in admitted], "o", color="tab:green", ms=4)
        # Refused requests go below zero, stacked within their burst.
        depth: dict[int, int] = {}
        refused_x, refused_y = [], []
        for e in events:
            if not e.admitted:
                depth[e.burst] = depth.get(e.burst, 0) + 1
                refused_x.append(e.time)
                refused_y.append(-depth[e.burst])
        ax.plot(refused_x, refused_y, "x", color="tab:red", ms=5, mew=1.5)
        ax.axhline(QUOTA, color="black", ls="--", lw=1)
        ax.axhline(0, color="grey", lw=0.8)
        for boundary in range(0, DURATION + 1, WINDOW):
            ax.axvline(boundary, color="grey", ls=":", lw=0.8)
        n_admitted, n_refused, most, _ = summarize(events)
        ax.set_title(
            f"{strategy}: {n_admitted} admitted, {n_refused} refused, at most {most} in any {WINDOW} s",
            loc="left",
            fontsize=11,
        )
        ax.set_ylim(-deepest - 1.5, 2 * QUOTA + 2.5)
        ticks = [*range(-deepest // 5 * 5, 0, 5), 0, QUOTA, 2 * QUOTA]
        ax.set_yticks(ticks, [str(abs(k)) for k in ticks])
        for label, tick in zip(ax.get_yticklabels(), ticks, strict=True):
            label.set_color("tab:red" if tick < 0 else "black")
        ax.set_ylabel("↑ admitted in last 60 s\n↓ refused", fontsize=9)
        ax.grid(axis="y", color="0.92")
    axes[-1].set_xlim(0, DURATION)
    axes[-1].set_xticks(range(0, DURATION + 1, 30))
    axes[-1].set_xlabel("seconds (dotted lines: minute boundaries, where fixed windows start)")
    figure.suptitle(
        f"{scenario} client, limit {LIMIT}. Green dot: admitted, at the count admitted in the last {WINDOW} s "
        f"(blue line).\nRed x: refused, stacked below zero. Dashed line: the quota.",
        fontsize=10.5,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    matplotlib.use("Agg")  # files only, no display needed
    # Storage.from_url warns that memory:// counts per process; expected here.
    logging.getLogger("flask_redis_throttle").setLevel(logging.ERROR)
    throttle = Pinned(Storage.from_url("memory://"))
    OUTPUT.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        results = {strategy: simulate(throttle, scenario, strategy) for strategy in STRATEGIES}
        path = OUTPUT / f"strategies-{scenario}.png"
        draw(scenario, results, path)
        sent = sum(count for _, count in SCENARIOS[scenario])
        print(f"{scenario}: {sent} requests, limit {LIMIT} -> {os.path.relpath(path)}")
        print(f"  {'strategy':<16}{'admitted':>9}{'refused':>9}{'max in 60 s':>13}{'longest Retry-After':>21}")
        for strategy, events in results.items():
            n_admitted, n_refused, most, longest = summarize(events)
            print(f"  {strategy:<16}{n_admitted:>9}{n_refused:>9}{most:>13}{longest:>19.1f} s")


if __name__ == "__main__":
    main()
