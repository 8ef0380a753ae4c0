"""Draw what shaping makes of requests that arrive in bursts, for
docs/shaping.rst, from a real run: the ``bursts`` section of
``benchmarks/results/shaping.json``, which ``benchmarks/shaping.py --json``
writes (several processes, a real ``redis-server``, the real script).

    python docs/plot_shaping.py

writes ``docs/_static/shaping.png`` and prints the run's figures (another
results file may be given as the argument).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "shaping.json"
OUTPUT = Path(__file__).parent / "_static" / "shaping.png"


def draw(run: dict, path: Path) -> None:
    """Top: when the requests arrived. Bottom: when each ran, or that it was refused."""
    events = run["events"]
    figure, (arrivals, turns) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True, height_ratios=(1, 2))
    arrivals.hist([t for t, _, _ in events], bins=[i / 20 for i in range(int(max(t for t, _, _ in events) * 20) + 21)])
    arrivals.set_ylabel("arrived\nper 50 ms", fontsize=9)
    arrivals.set_title(
        f"{run['requests']} requests in {len(run['bursts'])} bursts of 2 to 16 at once, "
        f"from {run['processes']} processes: "
        f"limit {run['limit']} with a delay of {run['delay_s'] * 1000:.0f} ms",
        loc="left",
        fontsize=11,
    )
    admitted = sorted((t, wait) for t, ok, wait in events if ok)
    for row, (t, wait) in enumerate(admitted):
        if wait > 0:
            turns.plot([t, t + wait], [row, row], color="tab:orange", lw=1.5)
    turns.plot(
        [t for t, w in admitted if w == 0],
        [r for r, (_, w) in enumerate(admitted) if w == 0],
        "o",
        color="tab:green",
        ms=5,
        label="ran at once",
    )
    turns.plot(
        [t + w for t, w in admitted if w > 0],
        [r for r, (_, w) in enumerate(admitted) if w > 0],
        "o",
        color="tab:orange",
        ms=5,
        label="waited for its turn (line: the wait)",
    )
    refused = sorted(t for t, ok, _ in events if not ok)
    turns.plot(
        refused,
        [-1 - (n % 8) for n in range(len(refused))],
        "x",
        color="tab:red",
        ms=5,
        mew=1.5,
        label="refused: its turn was past the delay",
    )
    turns.set_ylabel("admitted requests, in order\n(refused below zero)", fontsize=9)
    turns.set_xlabel("seconds from the first burst (the script's clock)")
    turns.legend(loc="upper left", fontsize=9)
    turns.grid(axis="x", color="0.92")
    turns.set_title(
        f"{run['admitted_at_once']} ran at once, {run['delayed']} waited "
        f"(longest {run['longest_wait_s'] * 1000:.0f} ms), "
        f"{run['refused']} refused; at most {run['most_in_window']} turns in any second",
        loc="left",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    matplotlib.use("Agg")  # files only, no display needed
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    run = json.loads(source.read_text("utf-8"))["bursts"]
    OUTPUT.parent.mkdir(exist_ok=True)
    draw(run, OUTPUT)
    print(
        f"{OUTPUT.relative_to(ROOT)}: {run['admitted_at_once']} at once, {run['delayed']} waited, "
        f"{run['refused']} refused, at most {run['most_in_window']} in a second"
    )


if __name__ == "__main__":
    main()
