"""Flask-Limiter's ``flask_limiter.commands``: ``cli``, the ``flask limiter``
group, which ``Limiter.init_app`` puts on the app's command line (see
:data:`COMMAND_NAMES`), and tests invoke with ``app.test_cli_runner()``.

It has Flask-Limiter's commands, translated onto the extension: ``config``
(the settings the limits run with, under Flask-Limiter's names), ``limits``
(every route's limits, and with ``--key`` what one key has used of each)
and ``clear`` (one key's counters). Beside them, the commands of ``flask
ratelimit`` but its ``limits``: ``status``, ``reset``, ``refusals``, ``near-limit``, the
overrides' and the local server's. See :doc:`/cli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from flask import current_app
from flask.cli import AppGroup

from ...cli import ratelimit, spec_name, storage_errors, table, throttle_of
from ...core.storage import STORAGE_ERRORS
from ...core.urls import redact
from ...decorators import LimitSpec
from ...extension import EXTENSION_KEY, RateLimitState, qualified_name
from ._routes import Key, NotMatched, Shown, Survey, match_endpoint
from ._settings import STRATEGIES
from .constants import ConfigVars

__all__ = ["COMMAND_NAMES", "cli"]

#: Flask-Limiter's commands, which take the place of ``flask ratelimit``'s of the same name.
THEIRS = ("config", "limits", "clear")

#: The names ``Limiter.init_app`` gives :data:`cli` on the app's command
#: line: Flask-Limiter's ``limiter``, and ``limiter-compat``, which nothing
#: else claims. Flask looks up its plugins' commands (those of the
#: ``flask.commands`` entry point) before the app's, so while Flask-Limiter
#: is installed ``flask limiter`` is always its own group, and only
#: ``flask limiter-compat`` reaches these commands.
COMMAND_NAMES = ("limiter", "limiter-compat")

#: ``flask limiter``: Flask-Limiter's commands, and the other commands of ``flask ratelimit``.
cli = AppGroup(
    "limiter",
    help="Flask-Limiter's commands (config, limits, clear) and flask ratelimit's others.",
    commands={name: command for name, command in ratelimit.commands.items() if name not in THEIRS},
)


def _installed() -> RateLimitState:
    """The app's rate limiting state, set up by a ``Limiter`` (or a ``RateLimit``)."""
    state: RateLimitState | None = current_app.extensions.get(EXTENSION_KEY)
    if state is None:
        raise click.ClickException(
            f"No Flask-Limiter extension installed on {current_app!r}: set one up with Limiter(key_func, app=app)"
        )
    return state


def _endpoint(endpoint: str | None, path: str | None, method: str | None) -> str | None:
    """The endpoint ``--endpoint`` or ``--path`` names; None for every one."""
    if endpoint is not None and path is not None:
        raise click.UsageError("give --endpoint or --path, not both")
    try:
        return match_endpoint(current_app, endpoint, path, method)
    except NotMatched as error:
        raise click.ClickException(str(error)) from None


def _filters(function: Any) -> Any:
    """The options that choose the routes, as Flask-Limiter's commands have them."""
    for option in reversed(
        (
            click.option("--endpoint", metavar="ENDPOINT", help="Only this endpoint's routes."),
            click.option("--path", metavar="PATH", help="Only the route PATH leads to, such as /items/42."),
            click.option(
                "--method",
                metavar="METHOD",
                callback=lambda _context, _param, value: value.upper() if value else None,
                help="Only this HTTP method's limits, and with --path the route it leads to for this method.",
            ),
        )
    ):
        function = option(function)
    return function


@cli.command("config")
def config_command() -> None:
    """Show the settings the app's limits run with, under Flask-Limiter's names."""
    state = _installed()
    settings = state.settings
    limiters = current_app.extensions.get("limiter") or ()
    key_func = next((limiter.key_func for limiter in limiters), None)
    counted = ", ".join(map(spec_name, settings.identities))
    theirs = {ours: theirs for theirs, ours in STRATEGIES.items()}.get(settings.strategy)
    rows = [
        ("Enabled", ConfigVars.ENABLED, str(settings.enabled)),
        (
            "Key function",
            ConfigVars.KEY_FUNC,
            f"{qualified_name(key_func)}(), counted as {counted}" if key_func is not None else counted,
        ),
        ("Key prefix", ConfigVars.KEY_PREFIX, repr(settings.key_prefix)),
        (
            "Strategy",
            ConfigVars.STRATEGY,
            settings.strategy if theirs in (None, settings.strategy) else f"{theirs}, run as {settings.strategy}",
        ),
        ("Storage", ConfigVars.STORAGE_URI, redact(settings.storage_url)),
        ("Storage options", ConfigVars.STORAGE_OPTIONS, _options(settings.storage_options)),
        ("Storage status", "", _status(state)),
        ("Application limits", ConfigVars.APPLICATION_LIMITS, _written(settings.application)),
        ("Default limits", ConfigVars.DEFAULT_LIMITS, _written(settings.default)),
        ("Meta limits", ConfigVars.META_LIMITS, _written(settings.meta)),
        ("Headers", ConfigVars.HEADERS_ENABLED, str(settings.headers_enabled)),
        ("Swallow errors", ConfigVars.SWALLOW_ERRORS, str(settings.fail_open)),
        ("In-memory fallback", ConfigVars.IN_MEMORY_FALLBACK_ENABLED, str(settings.fallback)),
        # A refused request is counted in no limit: the first breach always ends it.
        ("Fail on first breach", ConfigVars.FAIL_ON_FIRST_BREACH, "True"),
        (
            "On breach callback",
            ConfigVars.ON_BREACH,
            "None" if settings.on_breach is None else f"{qualified_name(settings.on_breach)}()",
        ),
    ]
    click.echo(table(("", "FLASK-LIMITER SETTING", "VALUE"), rows))


def _status(state: RateLimitState) -> str:
    """Whether the storage answers."""
    if state.throttle is None:
        return "none: RATELIMIT_ENABLED is False"
    try:
        state.throttle.storage.client.ping()
    except STORAGE_ERRORS as error:
        return f"Error: {error}"
    return "OK"


def _options(options: Mapping[str, Any]) -> str:
    """The storage options, with every value that may hold a secret (a
    string, a mapping such as ``sentinel_kwargs``) shown as ``***``."""
    shown = [
        f"{name}={value!r}" if value is None or isinstance(value, (bool, int, float)) else f"{name}=***"
        for name, value in sorted(options.items())
    ]
    return ", ".join(shown) or "none"


def _written(specs: tuple[LimitSpec, ...]) -> str:
    """Limits as written: their layers, or a dynamic limit's function."""
    texts = [
        "; ".join(map(str, spec.layers)) if spec.layers is not None else f"dynamic: {qualified_name(spec.limit)}()"
        for spec in specs
    ]
    return ", ".join(texts) or "none"


@cli.command("limits")
@_filters
@click.option(
    "--key",
    metavar="KEY",
    help="Also show what KEY, a value of the key function such as an IP address, has left of each limit.",
)
def limits_command(endpoint: str | None, path: str | None, method: str | None, key: str | None) -> None:
    """Show every route's limits, grouped by blueprint, after the meta and
    application limits; with --key, whether KEY's next request would pass each.

    Nothing is counted. A dynamic limit shows what its function returns for
    a request without headers to the route.
    """
    state = _installed()
    chosen = _endpoint(endpoint, path, method)
    survey = Survey.of(state, chosen, method)
    tester = None if key is None else Key(key, state, state.throttle)
    for tree in survey.trees(Shown.labels if tester is None else tester.states, chosen is None, current_app.name):
        click.echo(tree)
    if tester is not None:
        _check_key(tester)


def _check_key(tester: Key) -> None:
    """Fail when the storage could not answer, or the key is no identity any limit counts."""
    if tester.down is not None:
        raise click.ClickException(f"rate limit storage not available: {tester.down}")
    if tester.unknown is not None:
        raise click.BadParameter(f"no limit counts key {tester.value!r}: {tester.unknown}", param_hint="'--key'")


@cli.command("clear")
@click.option(
    "--key", metavar="KEY", required=True, help="Whose counters: a value of the key function, such as an IP address."
)
@_filters
@click.option("-y", "--yes", is_flag=True, help="Clear without asking first.")
def clear_command(key: str, endpoint: str | None, path: str | None, method: str | None, yes: bool) -> None:
    """Clear KEY's counters of every limit (the application limits and every
    route's), or of one route's; the meta limits' are kept.

    App servers may refuse KEY for up to a second more: their block caches
    trust a refusal that long.
    """
    state = _installed()
    throttle = throttle_of(state)
    chosen = _endpoint(endpoint, path, method)
    survey = Survey.of(state, chosen, method)
    tester = Key(key, state, throttle)
    app = current_app.name
    if not yes:
        for tree in survey.trees(tester.states, chosen is None, app, limited=True):
            click.echo(tree)
        _check_key(tester)
        click.confirm(f"Clear these limits for key {key}?", abort=True)
    limits = list(survey.every(chosen is None))
    if not any([tester.identities(shown) for shown in limits]):
        _check_key(tester)
    with storage_errors(throttle):
        deleted = tester.clear(limits)
    for tree in survey.trees(tester.cleared, chosen is None, app, limited=True):
        click.echo(tree)
    click.echo(f"Deleted {deleted} counter key{'' if deleted == 1 else 's'} of key {key}.")
    if throttle.caches_refusals and deleted:
        click.echo("App servers' block caches may go on refusing it for up to 1 second.")
