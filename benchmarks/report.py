#!/usr/bin/env python
"""Render the README's and ``docs/performance.rst``'s figures from one run of ``suite.py``.

Every performance figure the README and the performance page state, and every
target with its verdict, is written between markers in those files, and this
script writes it there from one JSON output of ``suite.py``: the committed
``benchmarks/results/suite.json``. No figure is typed by hand, so the pages
cannot disagree with each other or with the run. The markers:

* Markdown: ``<!-- figures:NAME:begin -->`` ... ``<!-- figures:NAME:end -->``
* reStructuredText: ``.. figures:NAME:begin`` ... ``.. figures:NAME:end``

Run it from the repository root after a new run::

    python benchmarks/suite.py --json benchmarks/results/suite.json --no-samples \\
        --plot docs/_static/performance.png
    python benchmarks/report.py            # rewrite the marked regions
    python benchmarks/report.py --check    # exit 1 if a region is out of date

It reads only the JSON (no Redis, no Flask-Limiter), so the test suite runs
``--check``'s comparison on every run (``tests/test_story.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "suite.json"
README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.rst"

#: The multiplication sign of the README's table.
TIMES = "\u00d7"

Report = Mapping[str, Any]


# --- reading the report ---------------------------------------------------------------------------


def load(path: Path = RESULTS) -> dict[str, Any]:
    """The suite's JSON output."""
    with path.open(encoding="utf-8") as source:
        report: dict[str, Any] = json.load(source)
    return report


def admitted(report: Report) -> Mapping[str, Any]:
    """Section 1-3's results, by variant name."""
    results: Mapping[str, Any] = report["sections"]["admitted"]["results"]
    return results


def strategies(report: Report, prefix: str) -> list[str]:
    """The strategies the run measured, ours (``ours-``) or Flask-Limiter's (``fl-``), in its order."""
    return [name.removeprefix(prefix) for name in admitted(report) if name.startswith(prefix)]


def span(values: Iterable[float], digits: int = 1, unit: str = "") -> str:
    """``4.0 to 4.7`` (or one figure when they round alike)."""
    ordered = sorted(values)
    low, high = f"{ordered[0]:,.{digits}f}", f"{ordered[-1]:,.{digits}f}"
    return f"{low}{unit}" if low == high else f"{low}{unit} to {high}{unit}"


def flask_limiter_ratios(report: Report) -> list[float]:
    """Flask-Limiter's added time / ours, like for like, one per strategy pair."""
    results = admitted(report)
    return [results[f"fl-{strategy}"]["vs_ours"] for strategy in strategies(report, "fl-")]


def machine(report: Report) -> str:
    """The machine and versions the figures belong to, in a sentence's words."""
    env = report["environment"]
    parsers = sorted(set(env["reply_parsers"].values()))
    hiredis = f"with hiredis {env['hiredis']}" if env["hiredis"] != "not installed" else "without hiredis"
    return (
        f"a {env['cpus']}-core machine shared with other jobs (so noisy): {env['python']}, Flask {env['flask']}, "
        f"Flask-Limiter {env['flask_limiter']} (limits {env['limits']}), redis-py {env['redis_py']} {hiredis} "
        f"({', '.join(parsers)}) for every client, redis-server {env['redis_server']} on loopback, "
        f"gunicorn {env['gunicorn']}"
    )


def verdict(target: Mapping[str, Any]) -> str:
    """``MET`` or ``MISSED by a factor of 1.91`` (``1.004`` for a near miss, never ``1.00``)."""
    if target["met"]:
        return "MET"
    factor = f"{target['factor']:.2f}"
    return f"MISSED by a factor of {target['factor']:.3f}" if factor == "1.00" else f"MISSED by a factor of {factor}"


def counts(values: Iterable[float]) -> str:
    """Commands per request: ``1``, ``7 or 8``, ``3 to 5``."""
    ordered = sorted({round(value) for value in values})
    if len(ordered) == 1:
        return str(ordered[0])
    joint = " or " if len(ordered) == 2 and ordered[1] - ordered[0] == 1 else " to "
    return f"{ordered[0]}{joint}{ordered[-1]}"


def target_items(report: Report) -> list[str]:
    """Every target, its figure and its verdict, one list item's text each."""
    items = []
    for t in report["targets"]:
        relation = "at most" if t["at_most"] else "at least"
        unit = t["unit"].strip()
        figure = f"**{t['value']:.3g} {unit}**"
        items.append(f"{t['what']}: {figure}, target {relation} {t['target']:g} {unit}: {verdict(t)}.")
    return items


# --- the README -----------------------------------------------------------------------------------


def readme_cost(report: Report) -> str:
    """The README's cost table, the sentence under it and the targets."""
    results = admitted(report)
    version = report["environment"]["flask_limiter"]
    rows = [
        ("one bare redis-py `PING` (the yardstick)", "ping", False),
        ("a Flask hook that sends one `PING` (the floor for any Redis-backed limiter)", "floor", False),
        *((f"flask-redis-throttle, {strategy}", f"ours-{strategy}", True) for strategy in strategies(report, "ours-")),
        *((f"Flask-Limiter {version}, {strategy}", f"fl-{strategy}", False) for strategy in strategies(report, "fl-")),
    ]
    lines = [
        f"| variant | added per request | {TIMES} PING | Redis commands sent per request | round trips |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, name, bold in rows:
        r = results[name]
        cells = [
            label,
            f"{r['per_call_us'] if name == 'ping' else r['added_us']:.0f} µs",
            f"{r['added_pings']:.2f}{TIMES}",
            f"{r['client_commands']:g}",
            f"{r['round_trips']:g}",
        ]
        if bold:
            cells = [f"**{cell}**" for cell in cells]
        lines.append("| " + " | ".join(cells) + " |")
    settings = report["settings"]
    lines += [
        "",
        wrap(
            f"Medians of {settings['rounds']} interleaved rounds of `{report['command']}` on {machine(report)}. "
            f"Flask-Limiter adds {span(flask_limiter_ratios(report))} times as much time as we do, like for like. "
            "Rerun it to get your own machine's figures."
        ),
        *(["", wrap(cluster_sentence(report))] if "cluster" in report["sections"] else []),
        "",
        "The targets, checked by the same run:",
        "",
        *(wrap(item, "-", "  ") for item in target_items(report)),
    ]
    return "\n".join(lines)


def cluster_sentence(report: Report) -> str:
    """What the cluster section found, in one paragraph."""
    section = report["sections"]["cluster"]
    results = section["results"]
    ours, single, fl = results["cluster"], results["single"], results["fl"]
    return (
        f"On a {section['masters']}-master Redis Cluster, with the two identities' counters on two nodes, we add "
        f"{ours['added_us']:,.0f} µs per request, {ours['vs_single']:.2f} times our {single['added_us']:,.0f} µs on "
        f"one node; Flask-Limiter on the same cluster adds {fl['added_us']:,.0f} µs, {fl['vs_ours']:.1f} times "
        f"ours. Redis spends {ours['script_us_per_request']:.0f} µs running our scripts per decision on the "
        f"cluster, {ours['script_vs_single']:.2f} times the {single['script_us_per_request']:.0f} µs on one node."
    )


def embedded(report: Report) -> Mapping[str, Any] | None:
    """Section 10's results (``memory://``, no Redis), or None if the run has none."""
    section: Mapping[str, Any] | None = report["sections"].get("embedded")
    return None if section is None else section["results"]


#: What the memory:// regions say when the run measured no memory:// figures.
NO_EMBEDDED = (
    "The committed run has no memory:// figures yet: `python benchmarks/suite.py` measures them (section 10), "
    "ours on the embedded store beside Flask-Limiter's pure-Python `memory://`, in one process."
)


def embedded_sentence(report: Report, results: Mapping[str, Any], code: str) -> str:
    """Our fixed-window time against Flask-Limiter's, and the target's verdict."""
    ours, theirs = results["ours-fixed-window"], results["fl-fixed-window"]
    target = next(t for t in report["targets"] if t["name"] == "memory-vs-flask-limiter")
    return (
        f"On {code}memory://{code}, with no Redis at all, our fixed window adds {ours['added_us']:.0f} µs to a "
        f"request (3 layers {TIMES} 2 identities), Flask-Limiter's {theirs['added_us']:.0f} µs: "
        f"{ours['vs_flask_limiter']:.2f} times as much; the target is at most {target['target']:g}: "
        f"{verdict(target)}. Medians of {report['settings']['rounds']} interleaved rounds, the same run."
    )


def readme_memory(report: Report) -> str:
    """The README's memory:// table: ours on the embedded store, Flask-Limiter's memory://."""
    results = embedded(report)
    if results is None:
        return wrap(NO_EMBEDDED)
    version = report["environment"]["flask_limiter"]
    lines = ["| on memory:// | added per request | ours / Flask-Limiter's, like for like |", "|---|---:|---:|"]
    for strategy in strategies(report, "ours-"):
        r = results[f"ours-{strategy}"]
        vs = f"{r['vs_flask_limiter']:.2f}{TIMES}" if r.get("vs_flask_limiter") else ""
        lines.append(f"| flask-redis-throttle, {strategy} | {r['added_us']:.0f} µs | {vs} |")
    for strategy in strategies(report, "fl-"):
        lines.append(f"| Flask-Limiter {version}, {strategy} | {results[f'fl-{strategy}']['added_us']:.0f} µs | |")
    return "\n".join([*lines, "", wrap(embedded_sentence(report, results, "`"))])


def rst_memory(report: Report) -> str:
    """The performance page's memory:// figures."""
    results = embedded(report)
    if results is None:
        return wrap(NO_EMBEDDED.replace("`", "``"))
    items = []
    for name, r in results.items():
        if name != "bare":
            vs = f", {r['vs_flask_limiter']:.2f} times Flask-Limiter's" if r.get("vs_flask_limiter") else ""
            items.append(f"{r['label']}: {r['added_us']:.0f} µs{vs}")
    return wrap(embedded_sentence(report, results, "``")) + "\n\n" + "\n".join(bullet(item) for item in items)


# --- the performance page -------------------------------------------------------------------------


def rst_environment(report: Report) -> str:
    return wrap(f"One full run of ``{report['command']}`` on {machine(report)}.")


def rst_table(report: Report) -> str:
    body = "\n".join(f"    {line}".rstrip() for line in report["table"].splitlines())
    return f".. code-block:: text\n\n{body}"


def rst_shows(report: Report) -> str:
    """The bullets under the table: each figure read from the report."""
    sections = report["sections"]
    results = admitted(report)
    ours = [results[f"ours-{s}"] for s in strategies(report, "ours-")]
    theirs = [results[f"fl-{s}"] for s in strategies(report, "fl-")]
    items = [
        f"**Admitted requests.** We add {span((r['added_us'] for r in ours), 0, ' µs')} per request, "
        f"{span(r['added_pings'] for r in ours)} ``PING``; Flask-Limiter adds "
        f"{span((r['added_us'] for r in theirs), 0, ' µs')}, {span(r['added_pings'] for r in theirs)} ``PING``: "
        f"{span(flask_limiter_ratios(report))} times as much, like for like. It sends "
        f"{counts(r['client_commands'] for r in theirs)} commands where we send "
        f"{counts(r['client_commands'] for r in ours)}.",
        f"**Redis's time** per request: ours {span((r['server_us_per_request'] for r in ours), 0, ' µs')}, "
        f"Flask-Limiter's {span((r['server_us_per_request'] for r in theirs), 0, ' µs')}. Redis counts whole "
        "microseconds per command, so these figures are coarse and vary between runs.",
    ]
    if "growth" in sections:
        growth = sections["growth"]["results"]
        small, large = growth["fixed-window 1x1"], growth["fixed-window 6x3"]
        growths = [growth[f"{s} 6x3"]["vs_base"] for s in ("fixed-window", "gcra")]
        items.append(
            f"**Growth.** From one layer on one identity ({small['server_commands']:g} commands inside Redis) to "
            f"six layers on three ({large['server_commands']:g}), our added time grows by {span(growths, 2)} times "
            f"(fixed-window and gcra); the round trip stays one. "
            f"{report['settings']['identities']:,} distinct clients in turn cost "
            f"{growth['many']['vs_base']:.2f} times one hot client's time."
        )
    if "flood" in sections:
        flood = sections["flood"]["results"]
        on, off, fl, refuse = flood["cache-default"], flood["cache-off"], flood["fl"], flood["refuse"]
        items.append(
            f"**Flood.** With the block cache, a refused request costs {on['client_commands']:.3g} commands sent "
            f"to Redis and {on['added_us']:,.0f} µs, of which {refuse['added_us']:,.0f} µs is what Flask takes to "
            f"answer any ``429``. Without it, {off['client_commands']:.3g} commands and {off['added_us']:,.0f} µs; "
            f"Flask-Limiter's cost {fl['client_commands']:.3g} commands and {fl['added_us']:,.0f} µs."
        )
    if "memory" in sections:
        memory = sections["memory"]
        ours_bytes, fl_bytes = (memory["results"][n]["bytes_per_client"] for n in ("ours", "fl"))
        items.append(
            f"**Memory.** {memory['identities']:,} clients each sending one request to ``{memory['spec']}`` "
            f"(fixed-window) grow Redis's ``used_memory`` by {ours_bytes:.0f} bytes a client for ours, "
            f"{fl_bytes:.0f} for Flask-Limiter's: {memory['ratio']:.2f} times. ``benchmarks/memory.py`` "
            "breaks this down by key and strategy."
            + "".join(
                f" One identity's key takes {used} bytes (``MEMORY USAGE``) in {strategy}."
                for strategy, used in memory.get("usage", {}).items()
            )
        )
    if "cluster" in sections:
        items.append(
            f"**Redis Cluster.** {cluster_sentence(report)} Each identity's script runs on its own node, so a "
            "request whose identities live on two nodes runs two scripts: Redis pays a script's fixed cost twice. "
            "On a 2-core machine running three nodes and the app, Redis's time also holds each node's wait for a "
            "core; ``benchmarks/instructions.py --cluster`` counts the work alone, in instructions."
        )
    if "results" in sections.get("e2e", {}):
        e2e = sections["e2e"]["results"]
        items.append(
            f"**End to end**, through gunicorn, ours keeps {e2e['ours']['vs_no_limiter']:.0%} of the bare app's "
            f"throughput ({e2e['none']['requests_per_second']:,.0f} requests per second), Flask-Limiter "
            f"{e2e['fl']['vs_no_limiter']:.0%}. The load generator runs on the same CPUs as gunicorn and Redis, "
            "which shrinks every difference."
            + (
                f" The floor, a hook that sends one ``PING`` per request and does nothing else, keeps "
                f"{e2e['floor']['vs_no_limiter']:.0%}: what any limiter that asks Redis once per request "
                "keeps at best here."
                if "floor" in e2e
                else ""
            )
        )
    if "local" in sections:
        local = sections["local"]
        on_redis, on_local = (local["results"][n]["added_us"] for n in ("ours-redis", "ours-local"))
        items.append(
            f"**local://.** On a server the app started itself, reached over a Unix socket, we add "
            f"{on_local:,.0f} µs per request; on the same server binary over loopback TCP, {on_redis:,.0f} µs: "
            f"{local['ratio']:.2f} times."
        )
    return "\n\n".join(bullet(item) for item in items)


def rst_where(report: Report) -> str:
    """Where our fixed-window time goes, from the same run's rows: split by
    the ``ours-py`` and ``round-trip`` rows (see ``harness.split``)."""
    results = admitted(report)
    ours, floor, ping = results["ours-fixed-window"], results["floor"], results["ping"]
    parts = ours["split_us"]
    items = [
        f"about {parts['python']:.0f} µs is our Python: finding the identities, building the keys, packing the "
        "arguments, decoding the reply and formatting the headers (the *reply canned* row: the same app, whose "
        "script calls are answered in the process with a reply Redis gave, so that it waits for no server). "
        "``python benchmarks/overhead.py --profile 3000`` shows where it goes;",
        f"about {parts['round_trip']:.0f} µs is the round trip, made from inside a request on the storage's "
        "kept connection (the *empty script's call* row: a bare app whose ``before_request`` hook sends an "
        "``EVALSHA`` of a script that only returns). The same hook sending a redis-py ``PING`` takes "
        f"{floor['added_us']:.0f} µs "
        f"(the *floor* row), and a ``PING`` timed in a tight loop {ping['per_call_us']:.0f} µs: a request's own "
        "work stands between two round trips;",
        f"the rest, about {parts['script']:.0f} µs, is our script as the request waits for it, over the empty "
        f"script's round trip. Redis's own time per call is {ours['server_us_per_request']:.0f} µs: "
        "one ``TIME``, then one read and one write per identity, whose three layers share one key; the rest is "
        "the bigger call's sending, Redis's reading of it, and the time a server that worked longer takes to "
        "answer on this machine.",
    ]
    return f"Of our fixed-window {ours['added_us']:.0f} µs in this run:\n\n" + "\n".join(bullet(item) for item in items)


def rst_targets(report: Report) -> str:
    return "\n".join(bullet(item) for item in target_items(report))


def wrap(text: str, first: str = "", indent: str = "", width: int = 76) -> str:
    """``text`` wrapped at ``width``, after ``first`` on its first line and ``indent`` on the others."""
    lines, line = [], first
    for word in text.split():
        if len(line) + 1 + len(word) > width and line.strip():
            lines.append(line)
            line = indent
        line += (" " if line.strip() else "") + word
    lines.append(line)
    return "\n".join(lines)


def bullet(text: str) -> str:
    """``* text``, wrapped, continuation lines indented two spaces."""
    return wrap(text, "*", "  ")


# --- the regions ----------------------------------------------------------------------------------

Renderer = Callable[[Report], str]
#: Each file's regions and what renders them.
REGIONS: dict[Path, dict[str, Renderer]] = {
    README: {"cost": readme_cost, "memory": readme_memory},
    PERFORMANCE: {
        "environment": rst_environment,
        "table": rst_table,
        "shows": rst_shows,
        "where": rst_where,
        "targets": rst_targets,
        "memory": rst_memory,
    },
}


def markers(path: Path, name: str) -> tuple[str, str]:
    """The begin and end lines of a region, in the file's markup."""
    if path.suffix == ".md":
        return f"<!-- figures:{name}:begin -->", f"<!-- figures:{name}:end -->"
    return f".. figures:{name}:begin", f".. figures:{name}:end"


def region(text: str, path: Path, name: str) -> re.Match[str]:
    """The region ``name`` of ``text``; an error names the file and the marker if it is missing."""
    begin, end = markers(path, name)
    found = re.search(rf"^{re.escape(begin)}\n(.*?)^{re.escape(end)}$", text, re.MULTILINE | re.DOTALL)
    if found is None:
        raise ValueError(f"{path.name}: no region between the lines {begin!r} and {end!r}")
    return found


def rendered(path: Path, report: Report) -> str:
    """The file's text with every region rewritten from the report."""
    text = path.read_text(encoding="utf-8")
    for name, render in REGIONS[path].items():
        found = region(text, path, name)
        # A blank line on either side: the markers stay apart from the markup.
        text = text[: found.start(1)] + "\n" + render(report) + "\n\n" + text[found.end(1) :]
    return text


def stale(report: Report, paths: Sequence[Path] = tuple(REGIONS)) -> list[Path]:
    """The files whose regions differ from what the report renders."""
    return [path for path in paths if rendered(path, report) != path.read_text(encoding="utf-8")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the README's and docs' figures from one suite run.")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"the suite's JSON (default: {RESULTS})")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a region is out of date")
    args = parser.parse_args(argv)
    report = load(args.results)
    if args.check:
        out_of_date = stale(report)
        for path in out_of_date:
            print(f"{path.relative_to(ROOT)} is out of date: run python benchmarks/report.py", file=sys.stderr)
        return 1 if out_of_date else 0
    for path in REGIONS:
        path.write_text(rendered(path, report), encoding="utf-8")
        print(f"Wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
