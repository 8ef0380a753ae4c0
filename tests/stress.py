"""Run the test suite several times in a row beside a CPU hog, to catch flaky tests.

A test that passes on a quiet machine and fails on a loaded one depends on
timing it does not control. This script makes the load: one busy loop per
core, for as long as the runs last. Every run must pass::

    python tests/stress.py --runs 10            # the whole suite, 10 times, under load
    python tests/stress.py --runs 1 -- -m redis # pytest arguments after --

It prints one line per run and a summary, and exits non-zero if any run
failed. ``.ci/run`` runs it once, so that a flaky test shows up in CI
before it blocks a landing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: One run of the suite may take at most this long before it counts as failed.
RUN_TIMEOUT = 900


def _burn() -> None:
    while True:
        pass


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10, help="how many times to run the suite (default 10)")
    parser.add_argument("--no-hog", action="store_true", help="run without the busy loops")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (put them after --)")
    options = parser.parse_args(argv)
    if options.runs < 1:
        parser.error("--runs must be at least 1")

    hogs = (
        []
        if options.no_hog
        else [multiprocessing.Process(target=_burn, daemon=True) for _ in range(os.cpu_count() or 1)]
    )
    for hog in hogs:
        hog.start()
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options.pytest_args]
    times: list[float] = []
    failed = 0
    try:
        for run in range(1, options.runs + 1):
            started = time.monotonic()
            try:
                code = subprocess.run(command, cwd=root, timeout=RUN_TIMEOUT, check=False).returncode
            except subprocess.TimeoutExpired:
                code = -1
            times.append(time.monotonic() - started)
            failed += code != 0
            verdict = "passed" if code == 0 else f"FAILED (exit {code})"
            print(f"stress: run {run} of {options.runs} {verdict} in {times[-1]:.0f} s", flush=True)
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(5)
    load = f"beside {len(hogs)} busy loop(s)" if hogs else "with no hog"
    print(
        f"stress: {options.runs - failed} of {options.runs} runs passed {load}; wall time per run "
        f"median {statistics.median(times):.0f} s, {min(times):.0f}-{max(times):.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
