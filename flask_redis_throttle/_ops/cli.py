"""The ``flask ratelimit`` commands (:doc:`/cli`), each working through the app's own state."""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
import redis
from flask.cli import AppGroup

from .._request.state import RateLimitState
from ..core.engine.keys import Identity, loggable
from ..core.engine.throttle import Throttle
from ..core.storages.clients import redact
from ..core.storages.embedded import EmbeddedRedis
from ..core.storages.local import LocalFolder, server_status, stop_server
from ..core.stores.refusals import RefusalLog
from ..decorators import state_of
from .console import duration, parse_moment, table, utc
from .override_changes import DISABLED, FAILURES, latest_changes, lift, overrides_of, set_override, unavailable
from .reports import (
    CHANGES_HEADER,
    LIMITS_HEADER,
    OVERRIDES_HEADER,
    STATUS_HEADER,
    change_rows,
    entry_rows,
    find_endpoint,
    find_identity,
    limit_rows,
    nothing_counts,
    override_rows,
    reset_counters,
    status_rows,
)


def _since(entries: str) -> Callable[[Callable[..., None]], Callable[..., None]]:

    def moment(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
        try:
            return None if value is None else parse_moment(value, time.time())
        except ValueError as error:
            raise click.BadParameter(str(error)) from None

    help = f"Only {entries} since then: an ISO time, or a span such as 10m, 1h, 2d."
    return click.option("--since", callback=moment, metavar="TIME", help=help)


ratelimit = AppGroup("ratelimit", help="Inspect and reset rate limits, and set overrides.")


@ratelimit.command("limits")
@click.option("--limited", is_flag=True, help="Show only the routes that have limits.")
def limits_command(limited: bool) -> None:
    """List every route with its limits: layers, strategy, scope and identities.

    Views without @limit have RATELIMIT_DEFAULT, if it is set; static files are never limited."""
    state = _state()
    if not state.settings.enabled:
        click.echo("note: RATELIMIT_ENABLED is False, so none of these limits is enforced.", err=True)
    rows = limit_rows(state, limited)
    if not rows:
        click.echo("No route has limits." if limited else "The app has no routes.")
        return
    click.echo(table(LIMITS_HEADER, rows))


@ratelimit.command("status")
@click.argument("identity")
@click.option("--endpoint", "-e", metavar="ENDPOINT", help="Only this endpoint's limits.")
def status_command(identity: str, endpoint: str | None) -> None:
    """Show what IDENTITY has used of each layer, what remains and when it resets.

    IDENTITY is ip:<address>, user:<id> or <key function>:<value>. Nothing is counted: the counters are read as
    a request would find them."""
    state, throttle, who = _named(identity, endpoint)
    with storage_errors(throttle):
        rows = status_rows(state, throttle, who, endpoint)
    if not rows:
        click.echo(nothing_counts(state, endpoint, who))
        return
    click.echo(f"{who}  (keys {throttle.keys_of(who)})")
    click.echo(table(STATUS_HEADER, rows))


@ratelimit.command("reset")
@click.argument("identity")
@click.option("--endpoint", "-e", metavar="ENDPOINT", help="Only the counters of this endpoint's scopes.")
def reset_command(identity: str, endpoint: str | None) -> None:
    """Delete IDENTITY's counters, in every scope or only ENDPOINT's.

    App servers may refuse the identity for up to a second more: their block caches trust a refusal that long."""
    state, throttle, who = _named(identity, endpoint, change=True)
    with storage_errors(throttle):
        reset = reset_counters(state, throttle, who, endpoint)
    if reset is None:
        click.echo(nothing_counts(state, endpoint, who) + " Nothing to reset.")
        return
    deleted, message = reset
    click.echo(message)
    if throttle.caches_refusals and deleted:
        click.echo("App servers' block caches may go on refusing it for up to 1 second.")


@ratelimit.command("refusals")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0), help="How many identities.")
@click.option("--recent", default=20, show_default=True, type=click.IntRange(min=0), help="How many refusals.")
@_since("refusals")
def refusals_command(top: int, recent: int, since: float | None) -> None:
    """Show the most refused identities and the latest refusals, from the refusal log."""
    throttle, log = _log("refusals")
    with storage_errors(throttle):
        ranking = log.top(top, since=since) if top else []
        latest = log.recent(recent, since=since) if recent else []
    period = _period(since)
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
        click.echo(table(*entry_rows(latest, "REFUSED BY", retry=True)))


@ratelimit.command("near-limit")
@click.option("--recent", default=20, show_default=True, type=click.IntRange(min=1), help="How many entries.")
@_since("entries")
def near_limit_command(recent: int, since: float | None) -> None:
    """Show the latest identities that passed RATELIMIT_NEAR_LIMIT of a layer, from the near-limit log: once per
    identity, layer and window."""
    throttle, log = _log("near_limits")
    with storage_errors(throttle):
        latest = log.recent(recent, since=since)
    period = _period(since)
    if not latest:
        click.echo(f"No identity came near its limit{period}.")
        return
    click.echo(f"Near the limit{period}, newest first:")
    click.echo(table(*entry_rows(latest, "IDENTITY", retry=False)))


def _period(moment: float | None) -> str:
    return f" since {utc(moment)} UTC" if moment is not None else ""


def _set_override(action: str, takes_limit: bool, help: str) -> None:

    def command(
        identity: str, scope: str | None, span: str | None, until: str | None, by: str | None, limit: str | None = None
    ) -> None:
        state = _state()
        with storage_errors(_shared(state), change=True):
            try:
                made = set_override(state, action, identity, limit, scope, until, span, by=by or _user())
            except ValueError as error:
                raise click.UsageError(str(error)) from None
        click.echo(f"{made.describe()} until {utc(made.until)} UTC; every worker follows it within 1 second.")

    for param in reversed(
        (
            click.argument("identity"),
            *((click.argument("limit"),) if takes_limit else ()),
            click.option("--scope", "-s", metavar="SCOPE", help="Only this scope (see `flask ratelimit limits`)."),
            click.option("--for", "span", metavar="SPAN", help="For how long: 90s, 2h, 1h30m, 7d."),
            click.option("--until", metavar="TIME", help="Or until when: an ISO time such as 2027-12-31 (UTC)."),
            click.option("--by", metavar="NAME", help="Who sets it, for the log; by default your user name."),
        )
    ):
        command = param(command)
    ratelimit.command("override" if takes_limit else action, help=help)(command)


_set_override(
    "limit",
    True,
    """Decide IDENTITY against LIMIT (such as 100/s;10000/h) instead of its limits, on one scope or on every scope,
    until a time or for a while.

    IDENTITY is ip:<address>, ip:<network> (such as ip:203.0.113.0/24), user:<id> or <key function>:<value>.""",
)
_set_override("allow", False, "Let IDENTITY through unlimited, on one scope or on every scope.")
_set_override(
    "block",
    False,
    """Refuse IDENTITY's requests, on one scope or on every scope, without asking Redis: 429 with Retry-After
    (or 403, see RATELIMIT_OVERRIDE_BLOCK_STATUS).""",
)


@ratelimit.command("lift")
@click.argument("identity", required=False)
@click.option("--scope", "-s", metavar="SCOPE", help="Only its override on this scope.")
@click.option("--all", "everyone", is_flag=True, help="Remove every override of everyone.")
@click.option("--by", metavar="NAME", help="Who removes them, for the log; by default your user name.")
def lift_command(identity: str | None, scope: str | None, everyone: bool, by: str | None) -> None:
    """Lift IDENTITY's overrides (other layers, allow or block), on every scope or only on SCOPE; or, with --all,
    every override."""
    state = _state()
    throttle = _shared(state)
    if (identity is None) != everyone:
        raise click.UsageError("name an IDENTITY, or give --all to remove every override")
    with storage_errors(throttle, change=True), _parameter("'IDENTITY'"):
        gone = lift(state, identity, scope, scope is None, by or _user())
    if not gone:
        click.echo("No such override; nothing removed.")
        return
    for override in gone:
        click.echo(f"removed: {override.describe()}")


@ratelimit.command("overrides")
@click.option("--changes", default=20, show_default=True, type=click.IntRange(min=0), help="How many recent changes.")
def overrides_command(changes: int) -> None:
    """List the overrides in force, and the latest changes: who, what, until when."""
    state = _state()
    with storage_errors(throttle_of(state)):
        table_now = overrides_of(state).table()
        latest = latest_changes(state, changes)
    if table_now.overrides:
        click.echo(table(OVERRIDES_HEADER, override_rows(table_now.overrides)))
    else:
        click.echo("No override is in force.")
    if latest:
        click.echo()
        click.echo("Latest changes, newest first:")
        click.echo(table(CHANGES_HEADER, change_rows(latest)))


def _shared(state: RateLimitState) -> Throttle:
    """The throttle of a change, refused on an embedded store unless the app is TESTING (see docs/cli.rst)."""
    throttle = throttle_of(state)
    if isinstance(throttle.storage.client, EmbeddedRedis) and not state.app.testing:
        raise click.UsageError(
            f"the storage is {throttle.storage.url}, which keeps counters and overrides in each process's memory: "
            "this command runs in a process that serves none of the app's requests (the app is not TESTING), so no "
            "app server would follow the change. Steer a running app on a storage its processes share: Redis "
            "(RATELIMIT_STORAGE_URL=redis://...) or local://."
        )
    return throttle


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment nor the password database
        return "cli"


server = AppGroup("server", help="Show or stop the local:// server this host's workers share.")
ratelimit.add_command(server)


@server.command("status")
def server_status_command() -> None:
    """Show whether the app's local:// server runs: its pid, version, uptime, clients and memory. Nothing is
    started. Exits 1 when it is not running."""
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
    """Stop the app's local:// server; its counters are lost. Workers that are still serving start it again at
    their next request that needs it."""
    folder = _local_folder(_state())
    try:
        pid = stop_server(folder)
    except redis.RedisError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"stopped the local server (pid {pid})" if pid is not None else "not running; nothing to stop")


def _local_folder(state: RateLimitState) -> LocalFolder:
    throttle = throttle_of(state)
    try:
        folder = throttle.local_folder()
    except redis.RedisError as error:  # an UnsafeFolder: a file in it changed since init_app
        raise click.ClickException(str(error)) from None
    if folder is None:
        raise click.ClickException(
            f"the app's rate limit storage is {throttle.url}, not a local:// server "
            "(set RATELIMIT_STORAGE_URL = 'local://')"
        )
    return folder


def _state() -> RateLimitState:
    try:
        state: RateLimitState = state_of()
    except RuntimeError as error:
        raise click.ClickException(str(error)) from None
    return state


def throttle_of(state: RateLimitState) -> Throttle:
    """:raises click.ClickException: if rate limiting is disabled."""
    if state.throttle is None:
        raise click.ClickException(DISABLED)
    return state.throttle


def _log(name: str) -> tuple[Throttle, RefusalLog]:
    """The app's throttle and its ``"refusals"`` or ``"near_limits"`` log."""
    state = _state()
    throttle, log = throttle_of(state), getattr(state, name)
    if log is None:
        missing = "RATELIMIT_REFUSAL_LOG_SIZE is 0" if state.refusals is None else "RATELIMIT_NEAR_LIMIT is None"
        raise click.ClickException(f"this app keeps no {name.replace('_', '-')[:-1]} log ({missing})")
    return throttle, log


def _named(identity: str, endpoint: str | None, change: bool = False) -> tuple[RateLimitState, Throttle, Identity]:
    """The state, throttle (:func:`_shared` for a ``change``) and identity of a command."""
    state = _state()
    throttle = _shared(state) if change else throttle_of(state)
    with _parameter("'IDENTITY'"):
        who = find_identity(identity, state)
    with _parameter("'--endpoint'"):
        find_endpoint(endpoint)
    return state, throttle, who


@contextmanager
def _parameter(hint: str) -> Iterator[None]:
    try:
        yield
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint=hint) from None


@contextmanager
def storage_errors(throttle: Throttle, change: bool = False) -> Iterator[None]:
    """Redis failures as a message and exit 1, saying when a ``change`` may be made all the same."""
    try:
        yield
    except FAILURES as error:
        raise click.ClickException(unavailable(error, change, f" at {redact(throttle.url)}")) from None
