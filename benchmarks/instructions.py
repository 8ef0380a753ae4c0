#!/usr/bin/env python
"""Redis's own work per decision, counted in CPU instructions rather than timed.

``suite.py`` prices Redis's time per decision from ``INFO commandstats``,
which on a shared machine moves by a third from one run to the next. This
counts instead: it runs one ``redis-server`` under valgrind's callgrind,
sends each variant's requests through its Flask app, and counts the
instructions the server executed for them (command parsing, the scripts,
the replies; not the kernel's side of the sockets). The same code and data
give the same count on any run, so a change to a script can be judged by a
few hundred requests, and ours is set beside Flask-Limiter's like for like.

Instructions are not time. They leave out what the kernel does for each
command's round trip, which weighs on Flask-Limiter's several commands per
request more than on our one script call; and a malloc or a number
formatted by ``printf`` costs more instructions per nanosecond than the
server's command dispatch. So the ratio here guides work on the scripts; the
target (Redis time per decision, ``DESIGN.md``) is judged by ``suite.py``.

It needs valgrind (``apt-get install valgrind``) and is not part of CI::

    python benchmarks/instructions.py                     # fixed-window, 300 requests each
    python benchmarks/instructions.py --strategies all --requests 500

Every limit has three layers and two identities, as in ``overhead.py``, and
every request is admitted.

``--cluster`` also counts ours on a 3-master Redis Cluster, every node under
callgrind, with the two identities on two masters as in ``suite.py``'s
cluster section, beside ours on the single node: the cluster's decision is
one script call per node, and each call pays the fixed price of a call
(the command, ``TIME``, the reply) again. ``suite.py`` prices the same from
``INFO commandstats``, whose times on a loaded 2-core machine also hold
the time a node waits for a core while the other runs::

    python benchmarks/instructions.py --cluster --requests 200
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from harness import (
    FLASK_LIMITER_STRATEGIES,
    LIKE_FOR_LIKE,
    Variant,
    base_environ,
    check,
    flask_limiter_variant,
    our_variant,
    ratio,
    render_table,
)

from flask_redis_throttle.testing import SERVER_VARIABLE, find_redis_server, free_port


class Callgrind:
    """A ``redis-server`` under callgrind, counting only while asked to."""

    def __init__(self, folder: str) -> None:
        self.port = free_port()
        self.out = Path(folder, "callgrind.out")
        self.process = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={self.out}",
                find_redis_server(),
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        client = redis.Redis(port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("redis-server did not start under valgrind") from None
                time.sleep(0.2)
        client.close()

    def _control(self, *args: str) -> None:
        _control(self.process.pid, *args)

    def count(self, variant: Variant, requests: int) -> float:
        """Instructions the server ran per request of ``variant``."""
        self._control("-i", "on")
        self._control("-z")  # what turning it on counted goes
        variant.run(requests)
        self._control("-i", "off")
        self._control("-d")
        dumps = sorted(self.out.parent.glob(self.out.name + ".*"), key=lambda path: path.stat().st_mtime)
        total = _totals(dumps[-1])
        dumps[-1].unlink()
        return total / requests

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


@contextmanager
def callgrind() -> Iterator[Callgrind]:
    with tempfile.TemporaryDirectory() as folder:
        server = Callgrind(folder)
        try:
            yield server
        finally:
            server.stop()


def _control(pid: int, *args: str) -> None:
    """Tell the callgrind running as ``pid`` to ``args`` (see ``callgrind_control``)."""
    subprocess.run(
        ["callgrind_control", *args, str(pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _totals(dump: Path) -> int:
    """The instructions a callgrind dump counted."""
    # "totals", not "summary": after a zeroing the summary underflows.
    match = re.search(r"^totals: (\d+)", dump.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no instruction count in {dump}")
    return int(match[1])


def cluster_counts(single: Callgrind, requests: int) -> tuple[float, float, int]:
    """Ours per decision on a 3-master cluster whose nodes run under callgrind
    (summed over the nodes), and on ``single``; and how many nodes the
    cluster's requests ran on."""
    # The cluster launcher serves the tests and the suite alike.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    from suite import two_node_user

    from tests.servers import RedisCluster

    with tempfile.TemporaryDirectory() as folder:
        wrapper = Path(folder, "redis-server")
        counting = f"valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file={folder}/cg.%p"
        wrapper.write_text(f'#!/bin/sh\nexec {counting} "{find_redis_server()}" "$@"\n')
        wrapper.chmod(0o755)
        os.environ[SERVER_VARIABLE], real = str(wrapper), os.environ.get(SERVER_VARIABLE)
        cluster = RedisCluster(3)
        try:
            cluster.start(timeout=180)
        finally:
            if real is None:
                del os.environ[SERVER_VARIABLE]
            else:
                os.environ[SERVER_VARIABLE] = real
        try:
            user, _ = two_node_user(cluster.url)
            environ = base_environ(user=user)
            ours = our_variant("cluster", "ours on the cluster", cluster.url, environ, "rlc:")
            alone = our_variant("single", "ours on one node", single.url, environ, "rls:")
            pids = [node.pid for node in cluster.masters()]
            for variant in (ours, alone):
                check(variant, environ)
                variant.run(20)
            on_one = single.count(alone, requests)
            for pid in pids:
                _control(pid, "-i", "on")
                _control(pid, "-z")
            ours.run(requests)
            counts = []
            for pid in pids:
                _control(pid, "-i", "off")
                _control(pid, "-d")
                dumps = sorted(Path(folder).glob(f"cg.{pid}.*"), key=lambda path: path.stat().st_mtime)
                counts.append(_totals(dumps[-1]))
        finally:
            cluster.close()
    # A node the requests never reached counted only its own housekeeping.
    busy = [count for count in counts if count > requests * 10_000]
    return sum(busy) / requests, on_one, len(busy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests counted per variant (default 300)")
    parser.add_argument(
        "--strategies",
        default="fixed-window",
        help="Flask-Limiter's strategies, each beside ours like for like, comma-separated, or 'all'",
    )
    parser.add_argument(
        "--cluster", action="store_true", help="also count ours on a 3-master cluster beside one node (slow to start)"
    )
    args = parser.parse_args()
    theirs = FLASK_LIMITER_STRATEGIES if args.strategies == "all" else tuple(args.strategies.split(","))
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("this benchmark needs valgrind's callgrind: apt-get install valgrind")
    environ = base_environ()
    rows = []
    with callgrind() as server:
        for strategy in theirs:
            ours = LIKE_FOR_LIKE[strategy]
            pair = [
                our_variant(f"ours-{ours}", f"ours {ours}", server.url, environ, f"rl{ours}:", strategy=ours),
                flask_limiter_variant(server.url, environ, strategy),
            ]
            counts = []
            for variant in pair:
                check(variant, environ)
                variant.run(20)  # load the scripts and open the connections before counting
                counts.append(server.count(variant, args.requests))
            share = ratio(counts[0], counts[1]) or 0.0
            pair_name = f"ours {ours}, Flask-Limiter {strategy}"
            rows.append([pair_name, f"{counts[0]:,.0f}", f"{counts[1]:,.0f}", f"{share:.2f}x"])
        if args.cluster:
            on_cluster, on_one, nodes = cluster_counts(server, args.requests)
    print(f"Instructions redis-server ran per decision, 3 layers x 2 identities, {args.requests} requests each:\n")
    print(render_table(["variants", "ours", "Flask-Limiter", "ours / theirs"], rows))
    if args.cluster:
        print(f"\nOurs fixed-window on a 3-master cluster, the identities on {nodes} nodes:\n")
        share = f"{ratio(on_cluster, on_one) or 0.0:.2f}x"
        table = [["ours fixed-window", f"{on_cluster:,.0f}", f"{on_one:,.0f}", share]]
        print(render_table(["variant", "cluster (all nodes)", "one node", "cluster / one node"], table))


if __name__ == "__main__":
    main()
