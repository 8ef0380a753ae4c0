"""``flask ratelimit``: see the limits, an identity's counters and the
refusal log, and reset an identity's counters, from the command line.

:class:`~flask_redis_throttle.RateLimit` adds the group to every app it is
set up on. Each command works through the app's own state, so it sees the
same counters as the app (and, for ``memory://``, the same in-process store).
See :doc:`/cli`.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click
import redis
from flask import current_app
from flask.cli import AppGroup
from werkzeug.routing import Rule

from .clients import redact
from .console import duration, parse_moment, table, utc
from .identity import parse_identity, spec_kinds, spec_name
from .keys import Identity, identity_tag, loggable
from .local import LocalFolder, folder_of, server_status, stop_server
from .rates import Layer
from .refusals import RefusalLog
from .reset import reset_identity
from .throttle import StorageUnavailable, Throttle
from .usage import usage

if TYPE_CHECKING:
    from .extension import RateLimitState
    from .plan import Plan, PlannedLimit

__all__ = ["ratelimit"]

ratelimit = AppGroup("ratelimit", help="Inspect and reset rate limits.")


@ratelimit.command("limits")
@click.option("--limited", is_flag=True, help="Show only the routes that have limits.")
def limits_command(limited: bool) -> None:
    """List every route with its limits: layers, strategy, scope and identities.

    Views without @limit have RATELIMIT_DEFAULT, if it is set; static files
    are never limited.
    """
    state = _state()
    if not state.settings.enabled:
        click.echo("note: RATELIMIT_ENABLED is False, so none of these limits is enforced.", err=True)
    rows = limit_rows(state, limited)
    if not rows:
        click.echo("No route has limits." if limited else "The app has no routes.")
        return
    click.echo(table(LIMITS_HEADER, rows))


#: The columns of ``flask ratelimit limits``, and of the dashboard's limits.
LIMITS_HEADER = ("RULE", "METHODS", "ENDPOINT", "LIMIT", "STRATEGY", "SCOPE", "IDENTITIES")


def limit_rows(state: RateLimitState, limited: bool = False) -> list[tuple[str, ...]]:
    """Every route of the current app with its limits, one row per limit,
    as ``flask ratelimit limits`` prints them and the dashboard shows them.

    :param limited: leave out the routes without limits.
    """
    rows: list[tuple[str, ...]] = []
    for rule in sorted(current_app.url_map.iter_rules(), key=lambda rule: (rule.rule, rule.endpoint)):
        # Methods with the same limits share a row.
        groups: dict[tuple[tuple[str, ...], ...], list[str]] = {}
        for method in _methods(rule):
            groups.setdefault(_limit_cells(_limits(state.plan(rule.endpoint, method))), []).append(method)
        for cells, methods in groups.items():
            if limited and not cells:
                continue
            route = (rule.rule, ",".join(methods), rule.endpoint)
            for cell in cells or (("no limit", "", "", ""),):
                rows.append((*route, *cell))
                route = ("", "", "")
    return rows


@ratelimit.command("status")
@click.argument("identity")
@click.option("--endpoint", "-e", metavar="ENDPOINT", help="Only this endpoint's limits.")
def status_command(identity: str, endpoint: str | None) -> None:
    """Show what IDENTITY has used of each layer, what remains and when it resets.

    IDENTITY is ip:<address>, user:<id> or <key function>:<value>. Nothing
    is counted: the counters are read as a request would find them.
    """
    state = _state()
    throttle = _throttle(state)
    who = _identity(identity, state)
    if endpoint is not None:
        endpoint = _endpoint(endpoint)
    with _storage(throttle):
        rows = status_rows(state, throttle, who, endpoint)
    if not rows:
        click.echo(nothing_counts(state, endpoint, who))
        return
    click.echo(f"{who}  (keys {throttle.prefix}{{{_tag(throttle, who)}}}:*)")
    click.echo(table(STATUS_HEADER, rows))


#: The columns of ``flask ratelimit status``, and of the dashboard's lookup.
STATUS_HEADER = ("ENDPOINT", "SCOPE", "STRATEGY", "LAYER", "USED", "REMAINING", "RESETS IN")


def status_rows(
    state: RateLimitState, throttle: Throttle, who: Identity, endpoint: str | None
) -> list[tuple[str, ...]]:
    """What ``who`` has used of each layer that counts it, as ``flask
    ratelimit status`` prints it and the dashboard's lookup shows it.
    Nothing is counted.

    :param endpoint: only this endpoint's limits, or None for every endpoint's.
    :raises StorageUnavailable: if Redis cannot answer.
    """
    endpoints = sorted(current_app.view_functions) if endpoint is None else [endpoint]
    rows: list[tuple[str, ...]] = []
    for name in endpoints:
        for limit in _counting(state, name, who):
            head = (name, limit.scope, limit.strategy)
            if limit.policy is None:
                rows.append((*head, "dynamic: not known outside a request", "", "", ""))
                continue
            for layer in usage(throttle, limit.policy, who):
                reset = duration(layer.reset) if layer.used else "-"
                rows.append((*head, _layer(layer.layer), str(layer.used), str(layer.remaining), reset))
                head = ("", "", "")
    return rows


@ratelimit.command("reset")
@click.argument("identity")
@click.option("--endpoint", "-e", metavar="ENDPOINT", help="Only the counters of this endpoint's scopes.")
def reset_command(identity: str, endpoint: str | None) -> None:
    """Delete IDENTITY's counters, in every scope or only ENDPOINT's.

    App servers may refuse the identity for up to a second more: their
    block caches trust a refusal that long.
    """
    state = _state()
    throttle = _throttle(state)
    who = _identity(identity, state)
    if endpoint is not None:
        endpoint = _endpoint(endpoint)
    with _storage(throttle):
        reset = reset_counters(state, throttle, who, endpoint)
    if reset is None:
        click.echo(nothing_counts(state, endpoint, who) + " Nothing to reset.")
        return
    click.echo(reset.message)
    if throttle.blocks is not None and reset.deleted:
        click.echo("App servers' block caches may go on refusing it for up to 1 second.")


@dataclass(frozen=True)
class Reset:
    """What :func:`reset_counters` deleted.

    :param identity: whose counters.
    :param endpoint: the endpoint whose scopes were reset, or None for every scope.
    :param scopes: those scopes; ``[None]`` for every scope.
    :param deleted: how many counter keys were deleted.
    """

    identity: Identity
    endpoint: str | None
    scopes: list[str | None]
    deleted: int

    @property
    def message(self) -> str:
        """One line saying what was deleted, for the CLI and the dashboard."""
        scopes = self.scopes
        where = (
            "every scope" if self.endpoint is None else f"scope{'s' * (len(scopes) > 1)} {', '.join(map(repr, scopes))}"
        )
        return f"Deleted {self.deleted} counter key{'' if self.deleted == 1 else 's'} of {self.identity} in {where}."


def reset_counters(state: RateLimitState, throttle: Throttle, who: Identity, endpoint: str | None) -> Reset | None:
    """Delete ``who``'s counters, in every scope or only ``endpoint``'s, and
    clear this process's block cache; as ``flask ratelimit reset`` and the
    dashboard's reset button do.

    :returns: what was deleted; None if no limit of ``endpoint`` counts ``who``.
    :raises redis.RedisError: if Redis cannot answer.
    """
    scopes: list[str | None] = [None]
    if endpoint is not None:
        scopes = list(dict.fromkeys(limit.scope for limit in _counting(state, endpoint, who)))
        if not scopes:
            return None
    return Reset(who, endpoint, scopes, reset_identity(throttle, who, scopes))


@ratelimit.command("refusals")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0), help="How many identities.")
@click.option("--recent", default=20, show_default=True, type=click.IntRange(min=0), help="How many refusals.")
@click.option("--since", metavar="TIME", help="Only refusals since then: an ISO time, or a span such as 10m, 1h, 2d.")
def refusals_command(top: int, recent: int, since: str | None) -> None:
    """Show the most refused identities and the latest refusals, from the refusal log."""
    state = _state()
    throttle = _throttle(state)
    log = _refusal_log(state)
    moment = None
    if since is not None:
        try:
            moment = parse_moment(since, time.time())
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="'--since'") from None
    with _storage(throttle):
        ranking = log.top(top, since=moment) if top else []
        latest = log.recent(recent, since=moment) if recent else []
    period = f" since {utc(moment)} UTC" if moment is not None else ""
    if not ranking and not latest:
        click.echo(f"No refusals{period}.")
        return
    if ranking:
        click.echo(f"Most refused identities{period}:")
        click.echo(table(("IDENTITY", "REFUSALS"), [(loggable(identity), str(count)) for identity, count in ranking]))
    if latest:
        if ranking:
            click.echo()
        click.echo(f"Latest refusals{period}, newest first:")
        # The identity whose counter refused, apart from the others present.
        header = ("TIME (UTC)", "ENDPOINT", "SCOPE", "LAYER", "STRATEGY", "REFUSED BY", "RETRY AFTER", "ALSO PRESENT")
        rows = [
            (
                utc(r.time),
                r.endpoint,
                r.scope,
                r.layer,
                r.strategy,
                loggable(r.identity),
                duration(r.retry_after),
                ", ".join(map(loggable, r.others)),
            )
            for r in latest
        ]
        click.echo(table(header, rows))


server = AppGroup("server", help="Show or stop the local:// server this host's workers share.")
ratelimit.add_command(server)


@server.command("status")
def server_status_command() -> None:
    """Show whether the app's local:// server runs: its pid, version, uptime,
    clients and memory. Nothing is started. Exits 1 when it is not running.
    """
    folder = _local_folder(_state())
    try:
        status = server_status(folder)
    except redis.RedisError as error:
        raise click.ClickException(f"the local server at {folder.socket} does not answer: {error}") from None
    if not status.running:
        click.echo(f"not running (socket {folder.socket}); the next request that needs it starts it")
        raise SystemExit(1)
    rows = [
        ("server", f"{status.product} {status.version}"),
        ("pid", str(status.pid)),
        ("socket", folder.socket),
        ("log", folder.log),
        ("uptime", duration(status.uptime)),
        ("clients", str(status.clients)),
        ("memory", status.memory),
    ]
    click.echo(table(("state", "running"), rows))


@server.command("stop")
def server_stop_command() -> None:
    """Stop the app's local:// server; its counters are lost. Workers that
    are still serving start it again at their next request that needs it.
    """
    folder = _local_folder(_state())
    try:
        pid = stop_server(folder)
    except redis.RedisError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"stopped the local server (pid {pid})" if pid is not None else "not running; nothing to stop")


def _local_folder(state: RateLimitState) -> LocalFolder:
    """The folder of the app's local:// server.

    :raises click.ClickException: when the app's storage is not ``local://``.
    """
    folder = folder_of(_throttle(state).storage.client)
    if folder is None:
        raise click.ClickException(
            f"the app's rate limit storage is {_throttle(state).storage.url}, not a local:// server "
            "(set RATELIMIT_STORAGE_URL = 'local://')"
        )
    return folder


def _state() -> RateLimitState:
    from .extension import EXTENSION_KEY  # not at the top: the extension imports this module

    state: RateLimitState = current_app.extensions[EXTENSION_KEY]
    return state


def _throttle(state: RateLimitState) -> Throttle:
    if state.throttle is None:
        raise click.ClickException("rate limiting is disabled on this app (RATELIMIT_ENABLED is False)")
    return state.throttle


def _refusal_log(state: RateLimitState) -> RefusalLog:
    if state.refusals is None:
        raise click.ClickException("this app keeps no refusal log (RATELIMIT_REFUSAL_LOG_SIZE is 0)")
    return state.refusals


def _identity(text: str, state: RateLimitState) -> Identity:
    try:
        return find_identity(text, state)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'IDENTITY'") from None


def find_identity(text: str, state: RateLimitState) -> Identity:
    """The identity written as ``text``; key functions may go by their short names.

    :raises ValueError: if ``text`` is not one, saying what would be.
    """
    kinds = {
        spec_name(spec)
        for endpoint in current_app.view_functions
        for limit in _endpoint_limits(state, endpoint)
        for spec in limit.identities
        if not isinstance(spec, str)
    }
    return parse_identity(text, state.settings.ipv6_prefix, sorted(kinds))


def _endpoint(name: str) -> str:
    try:
        return find_endpoint(name)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'--endpoint'") from None


def find_endpoint(name: str) -> str:
    """``name``, if the current app has such an endpoint.

    :raises ValueError: if it has not, naming the closest ones.
    """
    if name not in current_app.view_functions:
        close = difflib.get_close_matches(name, current_app.view_functions, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else "; `flask ratelimit limits` lists them"
        raise ValueError(f"no endpoint {name!r}{hint}")
    return name


def _methods(rule: Rule) -> list[str]:
    """The methods of ``rule`` worth showing: not the HEAD that Flask adds to
    GET, nor the OPTIONS it answers itself, which are never limited."""
    methods = set(rule.methods or ())
    if "GET" in methods:
        methods.discard("HEAD")
    if getattr(rule, "provide_automatic_options", False):
        methods.discard("OPTIONS")
    return sorted(methods)


def _limits(plan: Plan | None) -> list[PlannedLimit]:
    return [] if plan is None else list(plan.limits)


def _endpoint_limits(state: RateLimitState, endpoint: str) -> list[PlannedLimit]:
    """The limits of ``endpoint`` over all its methods, each limit once."""
    methods = {method for rule in current_app.url_map.iter_rules(endpoint) for method in _methods(rule)}
    found: dict[tuple[object, ...], PlannedLimit] = {}
    for method in sorted(methods) or ["GET"]:
        for limit in _limits(state.plan(endpoint, method)):
            layers = limit.policy.layers if limit.policy is not None else limit.spec.limit
            found.setdefault((layers, limit.scope, limit.strategy, limit.identities), limit)
    return list(found.values())


def _counting(state: RateLimitState, endpoint: str, identity: Identity) -> list[PlannedLimit]:
    """The limits of ``endpoint`` that count identities of ``identity``'s kind."""
    return [
        limit
        for limit in _endpoint_limits(state, endpoint)
        if identity.kind in {kind for spec in limit.identities for kind in spec_kinds(spec)}
    ]


def nothing_counts(state: RateLimitState, endpoint: str | None, identity: Identity) -> str:
    if endpoint is None:
        return f"No limit of this app counts {identity.kind} identities."
    if not _endpoint_limits(state, endpoint):
        return f"Endpoint {endpoint!r} has no limits."
    return f"No limit of endpoint {endpoint!r} counts {identity.kind} identities."


def _limit_cells(limits: list[PlannedLimit]) -> tuple[tuple[str, ...], ...]:
    return tuple(
        (
            _limit_text(limit),
            limit.strategy,
            limit.scope,
            ", ".join(spec_name(spec) for spec in limit.identities),
        )
        for limit in limits
    )


def _limit_text(limit: PlannedLimit) -> str:
    """The layers, or the function of a dynamic limit, with the options that
    change how it counts."""
    if limit.policy is None:
        text = f"dynamic: {getattr(limit.spec.limit, '__qualname__', 'function')}()"
    else:
        text = ";".join(_layer(layer) for layer in limit.policy.layers)
    notes = [note for note in (limit.shadow and "shadow", limit.source != "view" and limit.source) if note]
    return f"{text} ({', '.join(notes)})" if notes else text


def _layer(layer: Layer) -> str:
    return f"{layer.quota}/{layer.name}"


def _tag(throttle: Throttle, identity: Identity) -> str:
    return identity_tag(identity.kind, identity.value, throttle.secret)


@contextmanager
def _storage(throttle: Throttle) -> Iterator[None]:
    """Turn Redis failures into a message and a non-zero exit."""
    try:
        yield
    except (StorageUnavailable, redis.RedisError) as error:
        reason = error.__cause__ if isinstance(error, StorageUnavailable) else error
        raise click.ClickException(
            f"rate limit storage unavailable at {redact(throttle.storage.url)}: {reason}"
        ) from None
