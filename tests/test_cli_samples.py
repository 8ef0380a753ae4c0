"""The ``flask ratelimit`` samples in ``docs/cli.rst`` are real output.

Every ``$ flask ratelimit ...`` line of the page's console blocks is run, in
the page's order, on ``tests/shop.py``'s app after a fixed set of requests on
a pinned clock, and its output must be the page's, character for character:
so a column that drifts out of line, or a message that changes, fails here.
``python tests/test_cli_samples.py`` rewrites the page's samples from a run.

The refusal and near-limit logs' times come from Redis's clock, not the
pinned one, so they are written as the pinned clock's: the entries at its
start, a ``--since`` ten minutes before. The columns keep their widths.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path

import shop  # tests/shop.py: pytest and a script run here both have this directory on sys.path
from flask import Flask
from helpers import T0, Clock, flask_command, pinned_clock

CLI_PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.rst"
#: The pinned clock's start, in seconds.
START = T0 // 1_000_000
PROMPT = "$ flask ratelimit "
DATETIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
#: A Redis no one listens on, for the page's "storage unavailable" sample.
DOWN_URL = "redis://127.0.0.1:1/0"


def send(app: Flask, method: str, path: str, ip: str, times: int, **headers: str) -> list[int]:
    """The statuses of ``times`` requests, each response closed as a server
    closes it once sent: that gives back a concurrency slot and writes a
    near-limit entry."""
    client = app.test_client()
    statuses = []
    for _ in range(times):
        with client.open(path, method=method, environ_base={"REMOTE_ADDR": ip}, headers=headers) as response:
            statuses.append(response.status_code)
    return statuses


def some_requests(app: Flask, clock: Clock) -> None:
    """The traffic the page's samples were taken after."""
    clock.set(0.2)
    assert send(app, "GET", "/api/items", "192.0.2.1", 3, **{"X-Api-Key": "k-7f3a"}) == [200] * 3
    assert send(app, "POST", "/login", "192.0.2.1", 2) == [200] * 2
    clock.set(0.4)
    assert send(app, "POST", "/login", "2001:db8::17", 6) == [200] * 5 + [429]
    # Refused four times: the first by Redis, which logs it; the block cache answers the rest.
    assert send(app, "POST", "/login", "203.0.113.9", 9) == [200] * 5 + [429] * 4
    clock.set(0.6)
    # User 42 from two addresses: its own counter, not the second address's, is the one that refuses.
    assert send(app, "GET", "/api/items", "198.51.100.7", 5, **{"X-User": "42"}) == [200] * 5
    assert send(app, "GET", "/api/items", "198.51.100.4", 6, **{"X-User": "42"}) == [200] * 5 + [429]
    clock.set(34.3)


def pin_times(output: str) -> str:
    """The logs' real times as the pinned clock's (see the module's docstring)."""
    since = (datetime.fromtimestamp(START, timezone.utc) - timedelta(minutes=10)).strftime("%Y-%m-%d %H:%M:%S")
    at = datetime.fromtimestamp(START, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    output = re.sub(rf"since {DATETIME.pattern}", f"since {since}", output)
    return DATETIME.sub(lambda found: found[0] if found[0] == since else at, output)


def page_samples(text: str) -> list[tuple[str, str]]:
    """Each ``$ flask ratelimit`` command of the page's console blocks, with the output shown under it."""
    samples = []
    for block in re.findall(r"^\.\. code-block:: console\n\n((?:    .*\n|\n)+)", text, re.MULTILINE):
        lines = [line[4:] for line in block.rstrip("\n").splitlines()]
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
            samples.append((lines[start], "\n".join(lines[start + 1 : end]).strip("\n")))
    return samples


def run_samples(commands: list[str], clock: Clock) -> list[str]:
    """Run the commands in order on the shop app after :func:`some_requests`
    on the pinned ``clock``; each one's output."""
    outputs: list[str] = []
    app = shop.create_app()
    # The commands run in the app's own process, under test (TESTING), whose
    # test client serves its requests: the override commands change its memory:// store.
    app.testing = True
    some_requests(app, clock)
    down = shop.create_app(DOWN_URL)
    last_status = max(i for i, command in enumerate(commands) if command.startswith(PROMPT + "status"))
    for i, command in enumerate(commands):
        assert command.startswith(PROMPT), command
        args = shlex.split(command.removeprefix("$ flask "))
        # The page's last status sample is the one with Redis down.
        target = down if i == last_status else app
        result = flask_command(target, *args)
        # Only the logs' times come from Redis's clock; the overrides' are the pinned clock's.
        output = pin_times(result.output) if args[1] in ("refusals", "near-limit") else result.output
        outputs.append(output.rstrip("\n"))
    return outputs


def rewrite(text: str, outputs: list[str]) -> str:
    """The page with every sample's output replaced by ``outputs``, in the page's order."""
    pending = iter(outputs)

    def block(found: re.Match[str]) -> str:
        lines = [line[4:] for line in found[1].rstrip("\n").splitlines()]
        kept: list[str] = []
        for line in lines:
            if line.startswith("$ "):
                if kept:
                    kept.append("")
                kept += [line, *next(pending).splitlines()]
        return ".. code-block:: console\n\n" + "".join(f"    {line}".rstrip() + "\n" for line in kept) + "\n"

    return re.sub(r"^\.\. code-block:: console\n\n((?:    .*\n|\n)+?)(?=\S|\Z)", block, text, flags=re.MULTILINE)


def test_every_cli_sample_is_what_the_command_prints(clock: Clock) -> None:
    samples = page_samples(CLI_PAGE.read_text(encoding="utf-8"))
    assert len(samples) >= 8, "the page's samples were not found"
    outputs = run_samples([command for command, _ in samples], clock)
    for (command, shown), output in zip(samples, outputs, strict=True):
        assert shown == output, f"docs/cli.rst, {command!r}: run python tests/test_cli_samples.py"


if __name__ == "__main__":
    page = CLI_PAGE.read_text(encoding="utf-8")
    with pinned_clock() as pinned:
        outputs = run_samples([command for command, _ in page_samples(page)], pinned)
    CLI_PAGE.write_text(rewrite(page, outputs), encoding="utf-8")
    print(f"Wrote {CLI_PAGE}")
