"""What the benchmarks share: the apps and variants they compare, how they
time them, and how they count what each sends to Redis.

``suite.py``, ``overhead.py`` and the gunicorn workers of ``e2e.py`` (which
serve :func:`create_app`) import this module; it is not run on its own. Run
the scripts from the repository root: Python puts their directory,
``benchmarks/``, first on ``sys.path``, which is how they find it.

* The apps: the bare Flask app, the same app with one ``PING`` per request
  (the *floor* of any Redis-backed limiter), ours (``@limit``), and
  Flask-Limiter's (two ``@limiter.limit``: the remote address and an
  ``X-User`` key function). Every one serves ``GET /`` with the text ``ok``.
* The variants: each thing a runner times, built by one function here, so
  that a section states only which variants it compares.
* Timing: :func:`measure` runs the variants interleaved, a batch each per
  round, rotating the order every round; :func:`figures` takes the medians
  of (variant - bare app) paired by round.
* Counting: :func:`count` wraps redis-py's ``Connection`` to count commands
  and replies client side, and reads ``INFO commandstats`` deltas server side.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any
from unittest import mock

import redis
from flask import Flask, Request, request
from werkzeug.exceptions import TooManyRequests
from werkzeug.test import EnvironBuilder

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.storages.clients import DEFAULT_CLIENT_OPTIONS
from flask_redis_throttle.testing import redis_server

try:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address
except ImportError:  # a message is kinder than a traceback
    sys.exit('Flask-Limiter is not installed; run: pip install -e ".[test,bench]"')

#: Three layers, with quotas no benchmark reaches: every request is admitted.
SPEC = "1000000/s;10000000/m;100000000/h"
#: The same limits in Flask-Limiter's grammar, which has no one-letter units.
FLASK_LIMITER_SPEC = "1000000/second;10000000/minute;100000000/hour"
#: Our strategies, in the order the docs list them.
OUR_STRATEGIES: tuple[str, ...] = tuple(STRATEGIES)
FLASK_LIMITER_STRATEGIES: tuple[str, ...] = ("fixed-window", "moving-window", "sliding-window-counter")
#: Flask-Limiter's strategies, each beside the one of ours that does the same job.
LIKE_FOR_LIKE = {
    "fixed-window": "fixed-window",
    "moving-window": "sliding-log",
    "sliding-window-counter": "sliding-window",
}


@dataclass(frozen=True)
class Target:
    """One performance target: the only place its bound is written.

    ``suite.py`` checks every one against its run and writes the verdicts into
    its JSON output; the README and ``docs/performance.rst`` are rendered from
    that output (``benchmarks/report.py``), so no page can state another bound.
    """

    #: What is measured, in words.
    what: str
    #: The bound.
    bound: float
    #: The unit of the figure and the bound, as printed after them.
    unit: str
    #: True if the figure must be at most the bound, False if at least.
    at_most: bool

    @property
    def relation(self) -> str:
        """``<=`` or ``>=``."""
        return "<=" if self.at_most else ">="

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the target."""
        return value <= self.bound if self.at_most else value >= self.bound

    def cell(self, value: float) -> str:
        """The table's target column: ``<=1.8x PING MET``."""
        return f"{self.relation}{self.bound:g}{self.unit} {'MET' if self.met(value) else 'MISSED'}"


#: Every target of the project's design, by the name the suite's JSON gives it.
#: Times are added time per admitted request / one bare redis-py PING, 3 layers x 2
#: identities unless the name says otherwise.
TARGETS: dict[str, Target] = {
    "ours-fixed-window": Target("ours fixed-window, 3 layers x 2 identities: added time", 1.8, "x PING", True),
    "ours-sliding-window": Target("ours sliding-window, 3 layers x 2 identities: added time", 2.2, "x PING", True),
    "ours-sliding-log": Target("ours sliding-log, 3 layers x 2 identities: added time", 2.5, "x PING", True),
    "ours-gcra": Target("ours gcra, 3 layers x 2 identities: added time", 1.8, "x PING", True),
    "growth-1x1": Target("ours fixed-window, 1 layer x 1 identity: added time", 1.5, "x PING", True),
    "growth-6x3": Target("ours fixed-window, 6 layers x 3 identities: added time", 2.5, "x PING", True),
    "flask-limiter-ratio": Target("Flask-Limiter's added time / ours, like for like", 8.0, "x", False),
    "flood-commands": Target("flood, block cache on: commands sent per refused request", 0.01, " cmds", True),
    "memory-per-client": Target("Redis memory per client, fixed-window: ours / Flask-Limiter's", 0.6, "x", True),
    "memory-usage-packed": Target("MEMORY USAGE per identity, fixed-window and gcra, 3 layers", 160, " bytes", True),
    "memory-usage-sw": Target("MEMORY USAGE per identity, sliding-window, 3 layers", 300, " bytes", True),
    "redis-cpu": Target("Redis time per decision, 3 layers x 2 identities: ours / Flask-Limiter's", 0.75, "x", True),
    "e2e-throughput": Target("gunicorn end to end: requests per second / no limiter's", 0.8, "x", False),
    "local-vs-redis": Target("ours on local:// (Unix socket): added time / on redis:// (loopback)", 1.1, "x", True),
    "cluster-vs-single": Target(
        "ours fixed-window on a 3-master cluster, identities on 2 nodes: added time / on one node", 1.5, "x", True
    ),
    "cluster-flask-limiter-ratio": Target("on the cluster: Flask-Limiter's added time / ours", 6.0, "x", False),
    "cluster-redis-cpu": Target(
        "Redis time per decision (EVALSHA and EVAL usec): ours on the cluster / on one node", 1.1, "x", True
    ),
    "memory-vs-flask-limiter": Target(
        "memory://, fixed-window, 3 layers x 2 identities: our added time / Flask-Limiter's", 0.5, "x", True
    ),
}


#: The target for the time we add to an admitted request at 3 x 2, in PINGs
#: (``overhead.py`` checks its fixed-window run against it).
TARGET_PINGS = TARGETS["ours-fixed-window"].bound

CLIENT_IP = "192.0.2.10"
USER = "alice"
#: The header that shows each limiter at work: on an admitted answer, ours and
#: Flask-Limiter's; on a refused one, both.
OUR_HEADER, FLASK_LIMITER_HEADER, REFUSED_HEADER = "RateLimit", "X-RateLimit-Remaining", "Retry-After"

#: A WSGI environ.
Environ = dict[str, Any]


def user_key(req: Request) -> str | None:
    """Our key function: the user named by the ``X-User`` header."""
    return req.headers.get("X-User")


def flask_limiter_user_key() -> str:
    """The same for Flask-Limiter, whose key functions read the request themselves."""
    return request.headers.get("X-User", "")


def client_options() -> dict[str, Any]:
    """The redis-py options of every client here: those our storage uses."""
    return dict(DEFAULT_CLIENT_OPTIONS)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is not positive."""
    return a / b if a is not None and b is not None and b > 0 else None


# --- the apps -------------------------------------------------------------------------------------


def make_view() -> Callable[[], str]:
    """A new view function for each app: the decorators mark the function they get."""

    def view() -> str:
        return "ok"

    return view


def bare_app(name: str = "bare", hook: Callable[[], object] | None = None) -> Flask:
    """The app every *added* time is measured from: no limiter; ``hook``, if
    given, runs before each request (the floors, the refusing app)."""
    app = Flask(name)
    app.add_url_rule("/", "index", make_view())
    if hook is not None:
        app.before_request(hook)
    return app


def floor_app(clients: Sequence[redis.Redis]) -> Flask:
    """The bare app plus one ``PING`` to each client's server per request: the
    least a Redis-backed limiter whose request touches that many servers can
    add. To several servers, every ``PING`` is written before any reply is read."""
    if len(clients) == 1:
        client = clients[0]

        def one_round_trip() -> None:  # a hook that returns something answers the request
            client.ping()

        return bare_app("floor", one_round_trip)

    def overlapped_round_trips() -> None:
        taken = [(client.connection_pool, client.connection_pool.get_connection()) for client in clients]
        for _, connection in taken:
            connection.send_command("PING")
        for pool, connection in taken:
            connection.read_response()
            pool.release(connection)

    return bare_app(f"floor-{len(clients)}", overlapped_round_trips)


def refuse() -> None:
    """Answer 429 from a hook: what any refusal costs Flask."""
    raise TooManyRequests(retry_after=60)


def our_app(
    url: str,
    prefix: str = "rl:",
    *,
    spec: str = SPEC,
    strategy: str = "fixed-window",
    identities: Sequence[Any] = ("ip", user_key),
    config: Mapping[str, Any] | None = None,
    metrics: Any = False,
) -> Flask:
    """flask-redis-throttle: ``@limit(spec, identities=...)`` on the view.

    :param prefix: the key prefix; give each app its own, so that none shares counters.
    :param strategy: ``RATELIMIT_STRATEGY``.
    :param config: more settings, such as ``RATELIMIT_BLOCK_CACHE_SIZE``.
    :param metrics: ``RateLimit(metrics=...)``: False, or a ``prometheus_client`` registry.
    """
    app = Flask("ours")
    app.config["RATELIMIT_STORAGE_URL"] = url
    # Our defaults, spelled out: both libraries visibly get the same client options.
    app.config["RATELIMIT_STORAGE_OPTIONS"] = client_options()
    app.config["RATELIMIT_HEADERS_ENABLED"] = True
    app.config["RATELIMIT_KEY_PREFIX"] = prefix
    app.config["RATELIMIT_STRATEGY"] = strategy
    app.config.update(config or {})
    RateLimit(app, metrics=metrics)
    app.add_url_rule("/", "index", limit(spec, identities=list(identities))(make_view()))
    return app


def our_storage(app: Flask) -> Any:
    """Our app's :class:`~flask_redis_throttle.core.storages.storage.Storage`, or None."""
    state = app.extensions.get("ratelimit")
    return getattr(getattr(state, "throttle", None), "storage", None)


def flask_limiter_app(url: str, strategy: str, spec: str = FLASK_LIMITER_SPEC) -> tuple[Flask, Limiter]:
    """Flask-Limiter with ``strategy``: two ``@limiter.limit(spec)``, on the
    remote address and on the ``X-User`` key function, with headers on."""
    app = Flask(f"fl-{strategy}")
    limiter = Limiter(
        get_remote_address,
        app=app,
        storage_uri=url,
        storage_options=client_options(),
        strategy=strategy,
        headers_enabled=True,
        # The strategies keep different kinds of keys: separate prefixes keep them apart.
        key_prefix=f"fl-{strategy}",
    )
    limited = limiter.limit(spec, key_func=get_remote_address)(make_view())
    limited = limiter.limit(spec, key_func=flask_limiter_user_key)(limited)
    app.add_url_rule("/", "index", limited)
    return app, limiter


def create_app() -> Flask:
    """The app a gunicorn worker of ``e2e.py`` serves, as the environment asks.

    ``BENCH_LIMITER`` is ``none`` (the default), ``floor`` (one ``PING`` per
    request from a hook: the least any Redis-backed limiter adds), ``ours`` or
    ``flask-limiter``;
    ``BENCH_STRATEGY`` the strategy (``fixed-window`` unless set);
    ``BENCH_REDIS_URL`` the throwaway redis-server the suite started.
    """
    limiter = os.environ.get("BENCH_LIMITER", "none")
    strategy = os.environ.get("BENCH_STRATEGY", "fixed-window")
    url = os.environ.get("BENCH_REDIS_URL", "")
    if limiter == "none":
        return bare_app()
    if not url.startswith("redis://127.0.0.1:"):
        raise RuntimeError(f"BENCH_REDIS_URL must be a loopback redis:// URL, not {url!r}")
    if limiter == "floor":
        return floor_app([redis.Redis.from_url(url, **client_options())])
    if limiter == "ours":
        return our_app(url, "rl-e2e:", strategy=strategy)
    if limiter == "flask-limiter":
        return flask_limiter_app(url, strategy)[0]
    raise RuntimeError(f"BENCH_LIMITER must be one of none, floor, ours, flask-limiter, not {limiter!r}")


# --- driving the apps -----------------------------------------------------------------------------


def base_environ(remote_addr: str = CLIENT_IP, user: str = USER) -> Environ:
    """``GET /`` from ``remote_addr`` with ``X-User: user``, built once."""
    builder = EnvironBuilder(path="/", headers=[("X-User", user)], environ_base={"REMOTE_ADDR": remote_addr})
    try:
        return builder.get_environ()
    finally:
        builder.close()


def distinct_environs(base: Environ, n: int) -> list[Environ]:
    """n requests from n distinct clients: each its own address and user."""
    return [
        {**base, "REMOTE_ADDR": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", "HTTP_X_USER": f"user{i}"}
        for i in range(n)
    ]


def _write(data: bytes) -> None:
    """WSGI's legacy ``write``, which Flask never calls."""


def _close(body: Any) -> None:
    close = getattr(body, "close", None)
    if close is not None:
        close()


def wsgi_runner(
    app: Flask, environs: Sequence[Environ] | Environ, statuses: Counter[str] | None = None
) -> Callable[[int], None]:
    """Call the WSGI app n times, each on a fresh copy of a prebuilt environ.

    :param environs: one environ, or several to cycle through (the cycle
        carries on from one call of the runner to the next).
    :param statuses: if given, counts the status codes (``"200"``, ``"429"``) of the answers.
    """
    cycle = [environs] if isinstance(environs, dict) else list(environs)
    position = 0

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
        if statuses is not None:
            statuses[status[:3]] += 1
        return _write

    def run(n: int) -> None:
        nonlocal position
        size = len(cycle)
        for _ in range(n):
            body = app(dict(cycle[position]), start_response)
            position = (position + 1) % size
            for _chunk in body:
                pass
            _close(body)

    return run


def ping_runner(client: redis.Redis) -> Callable[[int], None]:
    """n bare redis-py ``PING`` round trips."""

    def run(n: int) -> None:
        ping = client.ping
        for _ in range(n):
            ping()

    return run


def probe(app: Flask, environ: Environ) -> tuple[str, dict[str, str], bytes]:
    """One request: its status, headers and body."""
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
        answer["status"], answer["headers"] = status, dict(headers)
        return _write

    body = app(dict(environ), start_response)
    try:
        data = b"".join(body)
    finally:
        _close(body)
    return answer["status"], answer["headers"], data


# --- the variants ---------------------------------------------------------------------------------


@dataclass
class Variant:
    """One thing to time: a runner, and what is known about it."""

    name: str
    label: str
    #: Runs the variant n times.
    run: Callable[[int], None]
    #: The app, to check its answer; None for the bare PING.
    app: Flask | None = None
    #: The redis-py client it talks through, to name its reply parser.
    client: redis.Redis | None = None
    #: A SCAN pattern matching its keys in Redis, to count its counters.
    key_pattern: str | None = None
    #: The header its answers must carry.
    header: str | None = None
    #: The status its answers must have.
    status: str = "200"
    #: The status codes of its answers from the timed rounds on, if it counts them:
    #: then only the answers of :attr:`status` divide its counts.
    statuses: Counter[str] | None = None
    #: One time per round: the mean of one call over the round's batch, in microseconds.
    samples: list[float] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)


def app_variant(
    name: str, label: str, app: Flask, environs: Environ | Sequence[Environ], counted: bool = False, **extra: Any
) -> Variant:
    """A variant that calls ``app``; ``counted``: it counts its answers' statuses;
    ``extra`` goes to :class:`Variant`."""
    statuses: Counter[str] | None = Counter() if counted else None
    return Variant(name, label, wsgi_runner(app, environs, statuses), app=app, statuses=statuses, **extra)


def bare_variant(environ: Environ) -> Variant:
    """The bare app: every *added* time is measured from it."""
    return app_variant("bare", "Flask app, no limiter", bare_app(), environ)


def yardsticks(url: str, environ: Environ) -> list[Variant]:
    """The PING and the bare app, which every timed run measures beside its variants."""
    ping_client = redis.Redis.from_url(url, **client_options())
    ping = Variant("ping", "PING (bare redis-py round trip)", ping_runner(ping_client), client=ping_client)
    return [ping, bare_variant(environ)]


def floor_variant(
    urls: Sequence[str], environ: Environ, label: str = "Flask app + 1 PING/request (floor)", name: str = "floor"
) -> Variant:
    """The floor: the bare app plus one ``PING`` to each of ``urls`` per request."""
    clients = [redis.Redis.from_url(url, **client_options()) for url in urls]
    return app_variant(name, label, floor_app(clients), environ)


def can_replies(app: Flask) -> bool:
    """Make the app's storage answer every script call with the first real reply
    it got, so that the app runs all of our Python but never waits for Redis.
    False if the package's internals have moved and this no longer applies."""
    sender = getattr(getattr(app.extensions.get("ratelimit"), "throttle", None), "sender", None)
    evaluate = getattr(sender, "evaluate", None)
    if evaluate is None:
        return False
    replies: dict[Any, Any] = {}

    def canned(strategy: str, *args: Any, **kwargs: Any) -> Any:
        if strategy not in replies:
            replies[strategy] = evaluate(strategy, *args, **kwargs)
        return replies[strategy]

    sender.evaluate = canned
    return True


def round_trip_variant(url: str, environ: Environ) -> Variant:
    """``round-trip``: an empty script's call, made from a ``before_request``
    hook on the storage's own kept connections (``Connections.call``, as
    ours makes it) and nothing else of ours."""
    storage = our_storage(our_app(url, "rl-trip:"))
    connections = storage.connections
    empty = storage.client.script_load("return {1, 1, 1, 1, 1, 1}")
    key = f"rl-trip:{{{CLIENT_IP}}}"

    def round_trip() -> None:
        connections.call(("EVALSHA", empty, 1, key))

    return app_variant("round-trip", "hook: an empty script's call", bare_app("round-trip", round_trip), environ)


def canned_variant(
    url: str, environ: Environ, name: str = "ours-py", label: str = "ours, Redis's reply canned", **options: Any
) -> Variant:
    """Ours (``options`` go to :func:`our_app`) with its script's reply
    canned (see :func:`can_replies`): all of our Python, no server waited for."""
    variant = our_variant(name, label, url, environ, f"rl-{name}:", **options)
    if not can_replies(variant.app):  # type: ignore[arg-type]
        raise RuntimeError("cannot can our storage's replies: the package's internals moved")
    variant.key_pattern = None  # its keys are those of its one real call
    return variant


def split(variants: Sequence[Variant], ours: str, canned: str = "ours-py") -> dict[str, float] | None:
    """The variant ``ours``'s added time split three ways by the
    :func:`round_trip_variant` and :func:`canned_variant` (named
    ``canned``) timed beside it, each a median over rounds of a
    difference paired by round, as added time is: our Python (``canned`` -
    the bare app: measured alone, with no server to wait for), the round
    trip (``round-trip`` - the bare app) and what is left, our script as
    the request waits for it (``ours`` - ``canned`` - the round trip); in
    microseconds. None when they were not timed."""
    by_name = {v.name: v.samples for v in variants}
    if "round-trip" not in by_name or canned not in by_name:
        return None
    bare, trip, replied = by_name["bare"], by_name["round-trip"], by_name[canned]
    return {
        "round_trip": statistics.median(paired(trip, bare)),
        "script": statistics.median(paired(paired(by_name[ours], replied), paired(trip, bare))),
        "python": statistics.median(paired(replied, bare)),
    }


def refusing_variant(environ: Environ) -> Variant:
    """No limiter, Flask answering 429 itself: what any refusal costs."""
    app = bare_app("refusing", refuse)
    return app_variant("refuse", "no limiter, Flask answering 429 itself", app, environ, status="429")


def our_variant(
    name: str,
    label: str,
    url: str,
    environs: Environ | Sequence[Environ],
    prefix: str = "rl:",
    refused: bool = False,
    **options: Any,
) -> Variant:
    """Ours on ``url`` with key ``prefix``; ``options`` go to :func:`our_app`.

    :param refused: its answers are 429s, whose statuses it counts.
    """
    app = our_app(url, prefix, **options)
    return app_variant(
        name,
        label,
        app,
        environs,
        refused,
        client=getattr(our_storage(app), "client", None),
        key_pattern=f"{prefix}*",
        header=REFUSED_HEADER if refused else OUR_HEADER,
        status="429" if refused else "200",
    )


def flask_limiter_variant(
    url: str,
    environ: Environ,
    strategy: str,
    label: str | None = None,
    name: str | None = None,
    spec: str = FLASK_LIMITER_SPEC,
    refused: bool = False,
) -> Variant:
    """Flask-Limiter with ``strategy``, limited as our variants are.

    :param refused: its answers are 429s, whose statuses it counts.
    """
    app, limiter = flask_limiter_app(url, strategy, spec)
    return app_variant(
        name or f"fl-{strategy}",
        label or f"Flask-Limiter {strategy}",
        app,
        environ,
        refused,
        # The redis-py client under its storage (limits' RedisStorage); None on memory://.
        client=getattr(limiter.storage, "storage", None),
        key_pattern=f"*/fl-{strategy}/*",
        header=REFUSED_HEADER if refused else FLASK_LIMITER_HEADER,
        status="429" if refused else "200",
    )


def check(variant: Variant, environ: Environ) -> None:
    """Stop unless the variant answers with its status (and "ok" for a 200) and its header."""
    if variant.app is None:
        return
    status, headers, body = probe(variant.app, environ)
    if not status.startswith(variant.status) or (variant.status == "200" and body != b"ok"):
        sys.exit(f"{variant.label}: expected {variant.status}, got {status} {body[:300]!r}")
    if variant.header is not None and variant.header not in headers:
        sys.exit(f"{variant.label}: no {variant.header} header in {headers}")


def warm_up(variants: Sequence[Variant], calls: int) -> None:
    """Run each variant a little: the first calls open connections, load each
    script (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA) and compile the apps'
    per-endpoint plans."""
    for variant in variants:
        variant.run(calls)


def prepare(variants: Sequence[Variant], environ: Environ, batch: int) -> None:
    """Warm the variants up, check each one's answer, warm them up again for
    at least a batch, and start counting their statuses afresh."""
    warm_up(variants, 5)
    for variant in variants:
        check(variant, environ)
    warm_up(variants, max(batch, 50))
    for variant in variants:
        if variant.statuses is not None:
            variant.statuses.clear()


# --- timing ---------------------------------------------------------------------------------------


def measure(variants: Sequence[Variant], rounds: int, batch: int, warmup_rounds: int) -> None:
    """Interleave the variants, round after round, rotating the order; keep one
    sample per variant and round: the mean time of one call over the batch."""
    gc.collect()
    variants = list(variants)
    for round_number in range(warmup_rounds + rounds):
        shift = round_number % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            run = variant.run
            start = time.perf_counter_ns()
            run(batch)
            elapsed = time.perf_counter_ns() - start
            if round_number >= warmup_rounds:
                variant.samples.append(elapsed / batch / 1000)


def interleaved(
    variants: Sequence[Variant], environ: Environ, settings: Mapping[str, int]
) -> dict[str, dict[str, Any]]:
    """Check, warm up and time ``variants`` in interleaved rounds; their figures by name."""
    prepare(variants, environ, settings["batch"])
    measure(variants, settings["rounds"], settings["batch"], settings["warmup"])
    return figures(variants)


#: Rounds of the small benchmarks that compare a few apps (compat.py, overrides.py).
RUN_DEFAULTS = {"rounds": 200, "batch": 40, "warmup": 5}
#: Their ``--quick``: a smoke test, too short to judge a target by.
RUN_QUICK = {"rounds": 10, "batch": 20, "warmup": 2}


def runs(
    description: str, one_run: Callable[[str, Mapping[str, int]], dict[str, dict[str, Any]]], argv: list[str] | None
) -> tuple[bool, Iterator[dict[str, dict[str, Any]]]]:
    """The command line of a small benchmark (``--quick``, ``--runs N``):
    whether it is quick, and each run's figures, from ``one_run(url,
    settings)`` on a fresh server, each printed after the run's heading."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a few seconds: few, short rounds")
    parser.add_argument("--runs", type=int, default=1, help="independent runs, each on a fresh server")
    args = parser.parse_args(argv)
    settings = RUN_QUICK if args.quick else RUN_DEFAULTS

    def each() -> Iterator[dict[str, dict[str, Any]]]:
        for run in range(1, args.runs + 1):
            with redis_server() as server:
                results = one_run(server.url, settings)
            print(f"run {run}: {settings['rounds']} rounds x {settings['batch']} calls, interleaved")
            yield results

    return args.quick, each()


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles."""
    if len(values) < 2:
        return values[0], values[0]
    q1, _median, q3 = statistics.quantiles(values, n=4)
    return q1, q3


def paired(samples: Sequence[float], base: Sequence[float]) -> list[float]:
    """(sample - base sample of the same round), round by round."""
    return [s - b for s, b in zip(samples, base, strict=True)]


def figures(variants: Sequence[Variant]) -> dict[str, dict[str, Any]]:
    """Each timed variant's figures, by name: per call; added to the ``bare``
    variant's time (the median over rounds of their difference in the same
    round, and its quartiles); in PINGs when there is a ``ping`` variant; its
    counts, samples and, if it counts them, the statuses of its answers."""
    by_name = {v.name: v for v in variants}
    ping = statistics.median(by_name["ping"].samples) if "ping" in by_name else None
    bare = by_name["bare"].samples
    results: dict[str, dict[str, Any]] = {}
    for variant in variants:
        entry: dict[str, Any] = {"label": variant.label, "per_call_us": statistics.median(variant.samples)}
        if variant.name == "ping":
            entry["added_pings"] = 1.0
        elif variant.name != "bare":
            added = paired(variant.samples, bare)
            entry.update(added_us=statistics.median(added), added_us_quartiles=quartiles(added))
            if ping is not None:
                entry["added_pings"] = entry["added_us"] / ping
        entry.update(variant.counts)
        entry["samples_us"] = variant.samples
        if variant.statuses is not None:
            entry["statuses"] = dict(variant.statuses)
        results[variant.name] = entry
    return results


def single_pings(client: redis.Redis, n: int) -> float:
    """The median of n PINGs timed one by one, in microseconds."""
    times = []
    for _ in range(n):
        start = time.perf_counter_ns()
        client.ping()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


# --- counting -------------------------------------------------------------------------------------


@contextmanager
def counting_commands() -> Iterator[Counter[str]]:
    """Count every command redis-py sends, by name, and the replies it reads
    (under ``#replies``), while the block runs."""
    counter: Counter[str] = Counter()
    cls = redis.connection.Connection
    send_command: Callable[..., Any] = cls.send_command
    read_response: Callable[..., Any] = cls.read_response

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = args[0]
        counter[(name.decode() if isinstance(name, bytes) else str(name)).upper()] += 1
        return send_command(self, *args, **kwargs)

    def counted_read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter["#replies"] += 1
        return read_response(self, *args, **kwargs)

    # A pipeline (one per cluster node) packs its commands together, past
    # send_command: each is counted here; its replies are read one by one
    # through read_response, counted above.
    pack_commands: Callable[..., Any] = cls.pack_commands

    def counted_pack_commands(self: Any, commands: Sequence[Any]) -> Any:
        for args in commands:
            name = args[0]
            counter[(name.decode() if isinstance(name, bytes) else str(name)).upper()] += 1
        return pack_commands(self, commands)

    patched = (
        (cls, "send_command", counted_send_command),
        (cls, "read_response", counted_read_response),
        (cls, "pack_commands", counted_pack_commands),
    )
    with ExitStack() as patches:
        for owner, name, counted in patched:
            patches.enter_context(mock.patch.object(owner, name, counted))
        yield counter


def command_stats(admin: redis.Redis) -> dict[str, tuple[int, int]]:
    """``INFO commandstats``: calls and microseconds spent, by command."""
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["calls"]), int(s["usec"])) for name, s in stats.items()}


SCRIPT_COMMANDS = ("evalsha", "evalsha_ro", "eval", "eval_ro")


def redis_usec(delta: Mapping[str, tuple[int, int]], sent: Mapping[str, float]) -> float:
    """Redis's own time for the commands a client sent, in microseconds.

    A script's ``usec`` already includes the commands it runs with
    ``redis.call``, which commandstats also counts under their own names; so
    only the commands the client sent count. When a command was both sent
    and run by a script (a ``GET``, say), it counts in proportion to how many
    of its calls were sent.
    """
    total = 0.0
    for name, sent_calls in sent.items():
        calls, usec = delta.get(name.lower(), (0, 0))
        if calls:
            total += usec * min(1.0, sent_calls / calls)
    return total


def tally(
    variant: Variant, servers: Sequence[redis.Redis], requests: int
) -> tuple[Counter[str], dict[str, tuple[int, int]]]:
    """Run the variant ``requests`` times, untimed: the commands and replies
    it sent (:func:`counting_commands`), and the ``INFO commandstats`` delta,
    summed over ``servers``, but for the ``INFO`` this takes."""
    before = [command_stats(server) for server in servers]
    with counting_commands() as sent:
        variant.run(requests)
    after = [command_stats(server) for server in servers]
    delta: dict[str, tuple[int, int]] = {}
    for old, new in zip(before, after, strict=True):
        for name, (calls, usec) in new.items():
            if name != "info":
                total = delta.get(name, (0, 0))
                was = old.get(name, (0, 0))
                delta[name] = (total[0] + calls - was[0], total[1] + usec - was[1])
    return sent, delta


def count(variant: Variant, admin: redis.Redis, requests: int, keys: bool = False) -> None:
    """What the variant sends per request, what Redis runs for it, and Redis's time.

    Fills ``variant.counts``. ``per`` requests are the divisor: all of them,
    or, if the variant counts its answers' statuses, only those of ``variant.status``.

    :param keys: also count the variant's keys in Redis (``key_pattern``).
    """
    seen = Counter(variant.statuses or {})
    sent, delta = tally(variant, [admin], requests)
    per = requests
    if variant.statuses is not None:
        per = variant.statuses[variant.status] - seen[variant.status]
    per = max(per, 1)
    sent_calls = {name: float(calls) for name, calls in sent.items() if not name.startswith("#")}
    server = {name: calls / per for name, (calls, _usec) in delta.items() if calls}
    client = {name: calls / per for name, calls in sent_calls.items()}
    scripts = [delta.get(name, (0, 0)) for name in SCRIPT_COMMANDS]
    script_calls, script_usec = sum(c for c, _ in scripts), sum(u for _, u in scripts)
    found = None
    if keys and variant.key_pattern is not None:
        found = sum(1 for _ in admin.scan_iter(match=variant.key_pattern, count=1000))
    variant.counts = {
        "requests": requests,
        "per": per,
        "client_commands": sum(client.values()),
        "client_by_command": dict(sorted(client.items())),
        "round_trips": sent["#replies"] / per,
        "server_evalsha": server.get("evalsha", 0) + server.get("evalsha_ro", 0),
        "server_commands": sum(server.values()),
        "server_by_command": dict(sorted(server.items(), key=lambda item: (-item[1], item[0]))),
        "server_us_per_script": script_usec / script_calls if script_calls else None,
        "server_us_per_request": redis_usec(delta, sent_calls) / per,
        "keys": found,
    }


def time_and_count(
    variants: Sequence[Variant], admin: redis.Redis | None, rounds: int, batch: int, warmup: int, requests: int,
    keys: bool = False,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Time the variants interleaved, then, with ``admin``, count each one's
    commands (``keys``: and keys); return each one's :func:`figures`."""
    measure(variants, rounds, batch, warmup)
    if admin is not None:
        for variant in variants:
            count(variant, admin, requests, keys)
    return figures(variants)


# --- reporting ------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals, or ``-``."""
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_count(value: float | None) -> str:
    """A count per request: whole if it is one, else two decimals."""
    if value is None:
        return "-"
    if 0 < abs(value) < 0.1:
        return f"{value:.4f}"
    if abs(value - round(value)) < 0.005:
        return str(round(value))
    return f"{value:.2f}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """A plain text table: the first ``left`` columns left-aligned, the rest
    right-aligned. A row of one cell is a heading across the table."""
    cells = [row for row in rows if len(row) > 1]
    widths = [max(len(row[i]) for row in (headers, *cells)) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        if len(row) == 1:
            return row[0]
        padded = (cell.ljust(widths[i]) if i < left else cell.rjust(widths[i]) for i, cell in enumerate(row))
        return "  ".join(padded).rstrip()

    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def breakdown(entries: Sequence[Mapping[str, Any]]) -> str:
    """Commands per request, by name, as sent by redis-py and as run by Redis."""
    lines = []
    for r in entries:
        if not r.get("server_by_command") and not r.get("client_by_command"):
            continue
        sent = ", ".join(f"{k} {fmt_count(v)}" for k, v in r.get("client_by_command", {}).items()) or "nothing"
        ran = ", ".join(f"{k} {fmt_count(v)}" for k, v in r.get("server_by_command", {}).items()) or "nothing"
        lines.append(f"  {r['label']}\n    sent: {sent}\n    ran:  {ran}")
    return "\n".join(lines)


def version(package: str) -> str:
    """The installed version of ``package``, or ``not installed``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def parser_name(client: redis.Redis) -> str:
    """The reply parser of the client's pooled connections."""
    pool = client.connection_pool
    try:
        connection = pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        connection = pool.get_connection("PING")
    try:
        return type(connection._parser).__name__
    finally:
        pool.release(connection)


def environment(server_version: str, parsers: Mapping[str, str]) -> dict[str, Any]:
    """The versions and machine a run's figures belong to.

    :param parsers: the reply parser of each variant's client, by variant.
    """
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "redis_server": server_version,
        "redis_py": redis.__version__,
        "hiredis": version("hiredis"),
        "reply_parsers": dict(parsers),
        "flask": version("flask"),
        "werkzeug": version("werkzeug"),
        "flask_redis_throttle": version("flask-redis-throttle"),
        "flask_limiter": version("flask-limiter"),
        "limits": version("limits"),
        "gunicorn": version("gunicorn"),
    }


def describe(env: Mapping[str, Any]) -> str:
    """Two lines naming the environment, for the top of a report."""
    names = sorted(set(env["reply_parsers"].values()))
    parsers = f"{names[0]} reply parser" if len(names) == 1 else f"reply parsers {env['reply_parsers']}"
    hiredis = f"hiredis {env['hiredis']}" if env["hiredis"] != "not installed" else "hiredis is not installed"
    return (
        f"{env['python']}, Flask {env['flask']}, Flask-Limiter {env['flask_limiter']} (limits {env['limits']}), "
        f"redis-server {env['redis_server']} on loopback, {env['cpus']} CPUs.\n"
        f"Every client is redis-py {env['redis_py']} with the same options and the {parsers} ({hiredis})."
    )
