"""Flask-Limiter's ``flask limiter`` commands over ``flask ratelimit``'s rows (:ref:`cli-flask-limiter`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import click
from flask import current_app
from flask.cli import AppGroup
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect

from ... import cli as ops
from ...core.engine.keys import Identity
from ...core.engine.throttle import StorageUnavailable
from ...core.storages.storage import STORAGE_ERRORS
from ...core.storages.urls import redact
from ...core.stores.usage import usage
from ...extension import PlannedLimit, RateLimitState, Settings, qualified_name, state_of
from ._limits import Apart
from .constants import ConfigVars

#: :data:`cli`'s names: Flask finds plugins' commands first, so with Flask-Limiter installed only the second.
COMMAND_NAMES = ("limiter", "limiter-compat")

cli = AppGroup(
    "limiter",
    help="Flask-Limiter's commands (config, limits, clear) and flask ratelimit's others.",
    commands={name: command for name, command in ops.ratelimit.commands.items() if name != "limits"},
)


def _installed() -> RateLimitState:
    state: RateLimitState | None = state_of(required=False)
    if state is None:
        raise click.ClickException(
            f"No Flask-Limiter extension installed on {current_app!r}: set one up with Limiter(key_func, app=app)"
        )
    return state


def _written(specs: Iterable[Any]) -> str:
    """Limits as written, or a dynamic limit's function."""
    return ", ".join(
        "; ".join(map(str, spec.layers)) if spec.layers is not None else f"{qualified_name(spec.limit)}()"
        for spec in specs
    )


#: ``flask limiter config``'s rows.
CONFIG: tuple[tuple[str, str, Callable[[Settings], object]], ...] = (
    ("Enabled", ConfigVars.ENABLED, lambda settings: settings.enabled),
    ("Identities", ConfigVars.KEY_FUNC, lambda settings: ", ".join(map(ops.spec_name, settings.identities))),
    ("Key prefix", ConfigVars.KEY_PREFIX, lambda settings: repr(settings.key_prefix)),
    ("Strategy", ConfigVars.STRATEGY, lambda settings: settings.strategy),
    ("Storage", ConfigVars.STORAGE_URI, lambda settings: redact(settings.storage_url)),
    ("Application limits", ConfigVars.APPLICATION_LIMITS, lambda settings: _written(settings.application)),
    ("Default limits", ConfigVars.DEFAULT_LIMITS, lambda settings: _written(settings.default)),
    ("Meta limits", ConfigVars.META_LIMITS, lambda settings: _written(settings.meta)),
    ("Headers", ConfigVars.HEADERS_ENABLED, lambda settings: settings.headers_enabled),
    ("Swallow errors", ConfigVars.SWALLOW_ERRORS, lambda settings: settings.fail_open),
    ("In-memory fallback", ConfigVars.IN_MEMORY_FALLBACK_ENABLED, lambda settings: settings.fallback),
)


@cli.command("config")
def config_command() -> None:
    """Show the app's settings by Flask-Limiter's names, and whether the storage answers."""
    state = _installed()
    rows = [(label, name, str(value(state.settings)) or "none") for label, name, value in CONFIG]
    status = "off: RATELIMIT_ENABLED is False"
    if state.throttle is not None:
        try:
            state.throttle.storage.client.ping()
            status = "OK"
        except STORAGE_ERRORS as error:
            status = f"Error: {error}"
    click.echo(ops.table(("", "FLASK-LIMITER SETTING", "VALUE"), [*rows, ("Storage status", "", status)]))


def _endpoint(endpoint: str | None, path: str | None, method: str | None) -> str | None:
    """The endpoint the options name; None for every one."""
    if endpoint is not None and path is not None:
        raise click.UsageError("give --endpoint or --path, not both")
    if endpoint is not None and endpoint not in current_app.view_functions:
        raise click.ClickException(f"endpoint {endpoint} not found; `flask limiter limits` lists every route")
    if path is None:
        return endpoint
    parts, adapter = urlsplit(path), current_app.url_map.bind("localhost")
    try:
        try:
            found, _ = adapter.match(parts.path, method=method, query_args=parts.query)
        except RequestRedirect as redirect:  # /health for /health/: the route it redirects to
            found, _ = adapter.match(urlsplit(redirect.new_url).path, method=method)
    except (NotFound, MethodNotAllowed):
        raise click.ClickException(f"{method or 'GET'}: {path} could not be matched to any route") from None
    return str(found)


def _routes(function: Callable[..., None]) -> Callable[..., None]:
    """Flask-Limiter's options that choose the routes, read into a :class:`Survey`."""

    @click.option("--endpoint", metavar="ENDPOINT", help="Only this endpoint's routes.")
    @click.option("--path", metavar="PATH", help="Only the route PATH leads to, such as /items/42.")
    @click.option("--method", callback=lambda _c, _p, value: value and value.upper(), help="Only this method.")
    @functools.wraps(function)  # its docstring, and the options it has
    def command(endpoint: str | None, path: str | None, method: str | None, **rest: Any) -> None:
        state = _installed()
        chosen = _endpoint(endpoint, path, method)
        rows = ops.route_limits(state, chosen, method)
        function(state, Survey(rows, everywhere=chosen is None, whole=chosen is None and method is None), **rest)

    return command


#: A tree of text: a label and the trees under it.
Tree = tuple[str, list[Any]]


class Survey:
    """The chosen rows of ``flask ratelimit limits`` but static files', grouped as Flask-Limiter's trees."""

    def __init__(self, rows: list[Any], everywhere: bool, whole: bool) -> None:
        self.rows, self.whole = [row for row in rows if row.rule.endpoint.rpartition(".")[2] != "static"], whole
        shared: dict[str, dict[tuple[object, ...], PlannedLimit]] = {"Meta limits": {}, "Application limits": {}}
        for row in self.rows:
            for limit in row.limits:
                title = "Meta limits" if limit.meta else "Application limits"
                if limit.meta or limit.source == "RATELIMIT_APPLICATION":
                    shared[title].setdefault((id(limit.spec), limit.scope), limit)
        self.shared = {title: list(limits.values()) for title, limits in shared.items() if limits and everywhere}

    @staticmethod
    def own(row: Any) -> list[PlannedLimit]:
        return [limit for limit in row.limits if not limit.meta and limit.source != "RATELIMIT_APPLICATION"]

    def limits(self) -> list[tuple[PlannedLimit, str | None]]:
        """Every limit shown, with its route's endpoint (None for a shared one)."""
        shared = [(limit, None) for limits in self.shared.values() for limit in limits]
        return shared + [(limit, row.rule.endpoint) for row in self.rows for limit in self.own(row)]

    def echo(self, leaves: Callable[[PlannedLimit], list[str]], limited: bool = False) -> None:
        """Print the trees, a leaf per label of ``leaves``; with ``limited``, only limited routes."""

        def grown(limits: Iterable[PlannedLimit]) -> list[Tree]:
            return [(label, []) for limit in limits for label in leaves(limit)]

        trees: list[Tree] = [(title, grown(limits)) for title, limits in self.shared.items()]
        blueprints: dict[str, list[Tree]] = {}
        for rule in {id(row.rule): row.rule for row in self.rows}.values():
            groups = [(", ".join(row.methods), grown(self.own(row))) for row in self.rows if row.rule is rule]
            groups = [group for group in groups if group[1]]
            if limited and not groups:
                continue
            children = groups[0][1] if len(groups) == 1 else groups
            if not groups:
                children = [("Exempt" if ops.is_exempt(rule.endpoint) else "No limits", [])]
            name = rule.endpoint.rpartition(".")[0] or current_app.name
            blueprints.setdefault(name, []).append((f"{rule.endpoint}: {rule.rule}", children))
        for tree in [*trees, *blueprints.items()]:
            click.echo("\n".join(_draw(tree)))


def _draw(tree: Tree) -> list[str]:
    label, children = tree
    lines = [label]
    for position, child in enumerate(children, 1):
        branch, rail = ("└── ", "    ") if position == len(children) else ("├── ", "│   ")
        head, *rest = _draw(child)
        lines += [branch + head, *(rail + line for line in rest)]
    return lines


def _labels(limit: PlannedLimit) -> list[str]:
    """One label per layer; a dynamic limit's function."""
    if limit.policy is None:
        spec = limit.spec
        return [f"dynamic: {qualified_name(spec.limit if callable(spec.limit) else spec.scope)}()"]
    return [str(layer) for layer in limit.policy.layers]


def _scope(limit: PlannedLimit, whole: bool, endpoint: str | None = None) -> tuple[str | None, bool]:
    """The scope ``clear`` resets (None: all, "": none), and whether it resets those beneath it instead."""
    scope = limit.spec.scope
    if whole:
        return None, False
    if isinstance(scope, Apart) and not callable(scope.scope):
        return scope.scope or endpoint, True
    return ("" if callable(scope) else limit.scope), False


class Key:
    """``--key``: a value of the key function, as each kind of identity a limit counts."""

    def __init__(self, value: str, state: RateLimitState) -> None:
        self.value, self.state, self.down, self.unknown, self.counted = value, state, "", "", False

    def identities(self, limit: PlannedLimit) -> list[Identity]:
        found = []
        for kind in ops.counted_kinds(limit):
            try:
                found.append(ops.parse_identity(f"{kind}:{self.value}", self.state.settings.ipv6_prefix))
            except ValueError as error:
                self.unknown = str(error)
        self.counted = self.counted or bool(found)
        return found

    def states(self, limit: PlannedLimit) -> list[str]:
        """Each label, with whether the key's next request would pass it and what remains of it."""
        labels, identities, throttle = _labels(limit), self.identities(limit), self.state.throttle
        if limit.policy is None or not identities:
            why = "not known outside a request" if identities else f"not counted for key {self.value}"
            return [f"{label}: {why}" for label in labels]
        layers = []
        if throttle is None:
            self.down = "rate limiting is disabled (RATELIMIT_ENABLED is False)"
        elif not self.down:
            try:
                layers = [usage(throttle, limit.policy, identity) for identity in identities]
            except StorageUnavailable as error:
                self.down = str(error.__cause__ or error)
        if self.down:
            return [f"{label}: Storage not available" for label in labels]
        states = []
        for label, used in zip(labels, zip(*layers, strict=True), strict=True):
            least = min(used, key=lambda layer: layer.remaining)
            verdict = "Pass" if least.remaining > 0 else "Fail"
            full = f", full again in {ops.duration(least.reset)}" if least.reset else ""
            states.append(f"{label}: {verdict} ({least.remaining} out of {least.layer.quota} remaining){full}")
        return states

    def check(self) -> None:
        if self.down:
            raise click.ClickException(f"rate limit storage not available: {self.down}")
        if self.unknown and not self.counted:
            raise click.BadParameter(f"no limit counts key {self.value!r}: {self.unknown}", param_hint="'--key'")


@cli.command("limits")
@_routes
@click.option("--key", metavar="KEY", help="Also show what KEY, a value of the key function, has left of each limit.")
def limits_command(state: RateLimitState, survey: Survey, key: str | None) -> None:
    """Show every route's limits; with --key, whether KEY's next request would pass each. Nothing is counted."""
    if key is None:
        survey.echo(_labels)
        return
    tester = Key(key, state)
    survey.echo(tester.states)
    tester.check()


@cli.command("clear")
@click.option("--key", metavar="KEY", required=True, help="Whose counters: a value of the key function.")
@_routes
@click.option("-y", "--yes", is_flag=True, help="Clear without asking first.")
def clear_command(state: RateLimitState, survey: Survey, key: str, yes: bool) -> None:
    """Clear KEY's counters of every limit, or of the chosen routes' limits, as
    `flask ratelimit reset` does; app servers may refuse KEY for a second more."""
    throttle = ops.throttle_of(state)
    tester = Key(key, state)
    if not yes:
        survey.echo(tester.states, limited=True)
        tester.check()
        click.confirm(f"Clear these limits for key {key}?", abort=True)
    scopes: dict[tuple[Identity, bool], dict[str | None, None]] = {}
    for limit, endpoint in survey.limits():
        scope, beneath = _scope(limit, survey.whole, endpoint)
        for identity in tester.identities(limit) if scope != "" else ():
            scopes.setdefault((identity, beneath), {})[scope] = None
    with ops.storage_errors(throttle):
        deleted = sum(throttle.reset(who, list(found), beneath=under) for (who, under), found in scopes.items())
    tester.check()

    def cleared(limit: PlannedLimit) -> list[str]:
        done = "not cleared, its scope function gives each request its own"
        return [f"{label}: {done if _scope(limit, survey.whole)[0] == '' else 'Cleared'}" for label in _labels(limit)]

    survey.echo(cleared, limited=True)
    click.echo(f"Deleted {deleted} counter key{'' if deleted == 1 else 's'} of key {key}.")
    if throttle.caches_refusals and deleted:
        click.echo("App servers' block caches may go on refusing it for up to 1 second.")
