"""Flask-Limiter's ``flask_limiter.commands``: ``cli``, the ``flask limiter``
group, which ``Limiter.init_app`` puts on the app's command line (see
:data:`COMMAND_NAMES`), and tests invoke with ``app.test_cli_runner()``.

It has Flask-Limiter's commands, translated onto the extension: ``config``
(the settings the limits run with, under Flask-Limiter's names), ``limits``
(the rows of ``flask ratelimit limits``, :func:`~flask_redis_throttle.cli.route_limits`,
drawn as Flask-Limiter's trees, and with ``--key`` what one key has used of
each, read at cost 0) and ``clear`` (one key's counters, reset by scope).
Beside them, the other commands of ``flask ratelimit``: ``status``,
``reset``, ``refusals``, ``near-limit``, the overrides' and the local
server's. See :doc:`/cli`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import click
from flask import Request, current_app, request
from flask.cli import AppGroup
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect, Rule

from ...cli import (
    counted_kinds,
    duration,
    is_exempt,
    parse_identity,
    ratelimit,
    route_limits,
    spec_name,
    storage_errors,
    table,
    throttle_of,
)
from ...core.engine.keys import Identity
from ...core.engine.throttle import Policy, StorageUnavailable, Throttle
from ...core.storages.storage import STORAGE_ERRORS
from ...core.storages.urls import redact
from ...core.stores.usage import LayerUsage, usage
from ...decorators import LimitSpec
from ...extension import PlannedLimit, RateLimitState, qualified_name, state_of
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
    state: RateLimitState | None = state_of(required=False)
    if state is None:
        raise click.ClickException(
            f"No Flask-Limiter extension installed on {current_app!r}: set one up with Limiter(key_func, app=app)"
        )
    return state


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


def _endpoint(endpoint: str | None, path: str | None, method: str | None) -> str | None:
    """The endpoint ``--endpoint``, or ``--path`` with ``--method``, names; None for every one."""
    if endpoint is not None and path is not None:
        raise click.UsageError("give --endpoint or --path, not both")
    if endpoint is not None:
        if endpoint not in current_app.view_functions:
            raise click.ClickException(f"endpoint {endpoint} not found; `flask limiter limits` lists every route")
        return endpoint
    if path is None:
        return None
    parts = urlsplit(path)
    adapter = current_app.url_map.bind("localhost")
    try:
        try:
            found, _ = adapter.match(parts.path, method=method, query_args=parts.query)
        except RequestRedirect as redirect:  # /health for /health/: the route it redirects to
            found, _ = adapter.match(urlsplit(redirect.new_url).path, method=method)
    except (NotFound, MethodNotAllowed):
        raise click.ClickException(f"{method or 'GET'}: {path} could not be matched to any route") from None
    return str(found)


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


@dataclass(frozen=True)
class Shown:
    """One limit of :func:`~flask_redis_throttle.cli.route_limits`'s rows, as
    Flask-Limiter's commands write it: its policy for a request to the route
    (None when a dynamic limit could not say outside a real request, with
    ``note`` saying why), and the scope :meth:`Key.clear` resets (None when a
    scope function gives each request its own; ``beneath``, for a dynamic
    limit of the shim that counts each of its strings in a scope beneath it)."""

    limit: PlannedLimit
    policy: Policy | None
    scope: str | None
    note: str = ""
    beneath: bool = False

    @classmethod
    def of(cls, limit: PlannedLimit, asked: Request) -> Shown:
        scope = None if callable(limit.spec.scope) else limit.scope
        beneath = getattr(limit.spec.scope, "beneath", None)  # see Dynamic.apart
        if beneath is not None:
            scope = beneath or asked.endpoint
        if limit.policy is not None:
            return cls(limit, limit.policy, scope)
        try:
            policy = limit.resolve(asked)
        except Exception as error:  # the app's function, called outside a real request
            return cls(limit, None, scope, f"not known outside a request: {type(error).__name__}", beneath is not None)
        raised = getattr(limit.spec.limit, "last", (None, None, None))[2]
        note = "" if policy is not None else "no limit for a request without headers"
        if policy is None and raised is not None:  # a shim's dynamic limit: it logged the error
            note = f"not known outside a request: {type(raised).__name__}"
        if policy is not None and beneath is None:
            scope = policy.scope
        return cls(limit, policy, scope, note, beneath is not None)

    @property
    def signature(self) -> tuple[object, ...]:
        layers = self.policy.layers if self.policy is not None else self.limit.spec.limit
        return (layers, self.scope, self.limit.strategy)

    def labels(self, details: bool = True) -> list[str]:
        """One label per layer, as ``5 per 1 minute``; with ``details``, what changes how it counts."""
        notes = self.notes() if details else []
        suffix = f" ({', '.join(notes)})" if notes else ""
        if self.policy is None:
            return [f"dynamic: {qualified_name(self.limit.spec.limit)}(), {self.note}{suffix}"]
        return [f"{layer}{suffix}" for layer in self.policy.layers]

    def notes(self) -> list[str]:
        """Its function, its scope when not the endpoint's, its cost, ``exempt_when``, ``deduct_when``, shadow mode."""
        spec, notes = self.limit.spec, []
        if callable(spec.limit) and self.policy is not None:
            notes.append(f"dynamic: {qualified_name(spec.limit)}()")
        if hasattr(spec.scope, "beneath"):
            pass  # the shim's own scope for a dynamic limit (see Dynamic.apart)
        elif callable(spec.scope):
            notes.append(f"scope {qualified_name(spec.scope)}(): {self.scope!r}")
        elif self.limit.source != "RATELIMIT_APPLICATION" and not self.limit.meta and spec.scope is not None:
            notes.append(f"shared scope {spec.scope!r}")
        if spec.cost != 1:
            notes.append(f"cost {qualified_name(spec.cost)}()" if callable(spec.cost) else f"cost {spec.cost}")
        for name in ("exempt_when", "deduct_when"):
            function = getattr(spec, name)
            if function is not None:
                notes.append(f"{name} {qualified_name(function)}()")
        return [*notes, "shadow"] if self.limit.shadow else notes


#: The labels of a limit's entries, one per layer.
Entry = Callable[[Shown], list[str]]
#: A tree of text: a label and the trees under it.
Tree = tuple[str, list[Any]]


def _draw(tree: Tree) -> list[str]:
    """``tree`` as lines, each child under a branch, the last one under ``└──``."""
    label, children = tree
    lines = [label]
    for position, child in enumerate(children, 1):
        branch, rail = ("└── ", "    ") if position == len(children) else ("├── ", "│   ")
        head, *rest = _draw(child)
        lines += [branch + head, *(rail + line for line in rest)]
    return lines


class Survey:
    """The rows of :func:`~flask_redis_throttle.cli.route_limits` for the
    chosen routes, as Flask-Limiter's commands group them: the meta and the
    application limits once each, then each route's own limits by blueprint.
    Static files have none."""

    def __init__(self, state: RateLimitState, endpoint: str | None, method: str | None) -> None:
        self.everywhere = endpoint is None
        self.meta: dict[tuple[object, ...], Shown] = {}
        self.application: dict[tuple[object, ...], Shown] = {}
        self.routes: list[tuple[Rule, list[tuple[tuple[str, ...], list[Shown]]]]] = []
        for route in route_limits(state, endpoint, method):
            rule = route.rule
            if rule.endpoint == "static" or rule.endpoint.endswith(".static"):
                continue
            if not self.routes or self.routes[-1][0] is not rule:
                self.routes.append((rule, []))
            own, groups = [], self.routes[-1][1]
            # A dynamic limit or a scope function is asked as for a request
            # without headers to the route, with the route's rule.
            with current_app.test_request_context("/" if rule.arguments else rule.rule, method=route.methods[0]):
                request.url_rule, request.view_args = rule, {}
                for limit in route.limits:
                    shown = Shown.of(limit, request)
                    if limit.meta:
                        self.meta.setdefault(shown.signature, shown)
                    elif limit.source == "RATELIMIT_APPLICATION":
                        self.application.setdefault(shown.signature, shown)
                    else:
                        own.append(shown)
            if own:
                groups.append((route.methods, own))

    def every(self) -> list[Shown]:
        """Every limit shown, the meta and application limits too when every route is."""
        shared = [*self.meta.values(), *self.application.values()] if self.everywhere else []
        return shared + [shown for _, groups in self.routes for _, group in groups for shown in group]

    def echo(self, entry: Entry, limited: bool = False) -> None:
        """Print the trees; with ``limited``, only the routes with limits of their own."""

        def leaves(limits: Iterable[Shown]) -> list[Tree]:
            return [(label, []) for shown in limits for label in entry(shown)]

        trees: list[Tree] = []
        if self.everywhere:
            for title, limits in (("Meta limits", self.meta), ("Application limits", self.application)):
                if limits:
                    trees.append((title, leaves(limits.values())))
        blueprints: dict[str, Tree] = {}
        for rule, groups in self.routes:
            if limited and not groups:
                continue
            name = rule.endpoint.rpartition(".")[0] or current_app.name
            blueprint = blueprints.setdefault(name, (name, []))
            children: list[Tree]
            if not groups:
                children = [("Exempt" if is_exempt(rule.endpoint) else "No limits", [])]
            elif len(groups) == 1:
                children = leaves(groups[0][1])
            else:
                children = [(", ".join(methods), leaves(group)) for methods, group in groups]
            blueprint[1].append((f"{rule.endpoint}: {rule.rule}", children))
        for tree in [*trees, *blueprints.values()]:
            click.echo("\n".join(_draw(tree)))


class Key:
    """What ``--key`` names: a value of the key function, as the identity of
    each kind a limit counts (an IP address for ``get_remote_address``)."""

    def __init__(self, value: str, state: RateLimitState) -> None:
        self.value, self.state, self.throttle = value, state, state.throttle
        #: Why the storage could not answer, once it did not; why the key is
        #: no identity a limit counts, while it is none.
        self.down: str | None = (
            None if self.throttle is not None else "rate limiting is disabled (RATELIMIT_ENABLED is False)"
        )
        self.unknown: str | None = None
        self.counted = False

    def identities(self, shown: Shown) -> list[Identity]:
        found = []
        for kind in counted_kinds(shown.limit):
            try:
                found.append(parse_identity(f"{kind}:{self.value}", self.state.settings.ipv6_prefix))
            except ValueError as error:
                self.unknown = None if self.counted else str(error)
        self.counted = self.counted or bool(found)
        self.unknown = None if self.counted else self.unknown
        return found

    def states(self, shown: Shown) -> list[str]:
        """One label per layer: whether the key's next request would pass it, and what remains of it."""
        labels, identities = shown.labels(), self.identities(shown)
        if shown.policy is None:
            return labels
        if not identities:
            return [f"{label}: not counted for key {self.value}" for label in labels]
        if self.down is None:
            assert self.throttle is not None  # down says when it is None
            try:
                layers = [usage(self.throttle, shown.policy, identity) for identity in identities]
            except StorageUnavailable as error:
                self.down = str(error.__cause__ or error)
        if self.down is not None:
            return [f"{label}: Storage not available" for label in labels]
        return [
            f"{label}: {_state(min(used, key=lambda layer: layer.remaining))}"
            for label, used in zip(labels, zip(*layers, strict=True), strict=True)
        ]

    def cleared(self, shown: Shown) -> list[str]:
        labels = shown.labels(details=False)
        if shown.scope is None:
            return [f"{label}: not cleared, its scope function gives each request its own" for label in labels]
        if not self.identities(shown):
            return [f"{label}: not counted for key {self.value}" for label in labels]
        return [f"{label}: Cleared" for label in labels]

    def clear(self, throttle: Throttle, limits: Iterable[Shown]) -> int:
        """Delete the key's counters of ``limits``, scope by scope; how many counter keys were deleted."""
        scopes: dict[tuple[Identity, bool], dict[str | None, None]] = {}
        for shown in limits:
            for identity in self.identities(shown) if shown.scope is not None else ():
                scopes.setdefault((identity, shown.beneath), {})[shown.scope] = None
        return sum(throttle.reset(who, list(found), beneath=under) for (who, under), found in scopes.items())

    def check(self) -> None:
        """Fail when the storage could not answer, or the key is no identity any limit counts."""
        if self.down is not None:
            raise click.ClickException(f"rate limit storage not available: {self.down}")
        if self.unknown is not None:
            raise click.BadParameter(f"no limit counts key {self.value!r}: {self.unknown}", param_hint="'--key'")


def _state(layer: LayerUsage) -> str:
    verdict = "Pass" if layer.remaining > 0 else "Fail"
    full = f", full again in {duration(layer.reset)}" if layer.reset else ""
    return f"{verdict} ({layer.remaining} out of {layer.layer.quota} remaining){full}"


@cli.command("limits")
@_filters
@click.option("--key", metavar="KEY", help="Also show what KEY, a value of the key function, has left of each limit.")
def limits_command(endpoint: str | None, path: str | None, method: str | None, key: str | None) -> None:
    """Show every route's limits, grouped by blueprint, after the meta and
    application limits; with --key, whether KEY's next request would pass each.

    Nothing is counted. A dynamic limit shows what its function returns for
    a request without headers to the route.
    """
    state = _installed()
    survey = Survey(state, _endpoint(endpoint, path, method), method)
    if key is None:
        survey.echo(lambda shown: shown.labels())
        return
    tester = Key(key, state)
    survey.echo(tester.states)
    tester.check()


@cli.command("clear")
@click.option("--key", metavar="KEY", required=True, help="Whose counters: a value of the key function.")
@_filters
@click.option("-y", "--yes", is_flag=True, help="Clear without asking first.")
def clear_command(key: str, endpoint: str | None, path: str | None, method: str | None, yes: bool) -> None:
    """Clear KEY's counters of every limit (the meta and application limits
    and every route's), or of one route's.

    App servers may refuse KEY for up to a second more: their block caches
    trust a refusal that long.
    """
    state = _installed()
    throttle = throttle_of(state)
    survey = Survey(state, _endpoint(endpoint, path, method), method)
    tester = Key(key, state)
    if not yes:
        survey.echo(tester.states, limited=True)
        tester.check()
        click.confirm(f"Clear these limits for key {key}?", abort=True)
    with storage_errors(throttle):
        deleted = tester.clear(throttle, survey.every())
    tester.check()
    survey.echo(tester.cleared, limited=True)
    click.echo(f"Deleted {deleted} counter key{'' if deleted == 1 else 's'} of key {key}.")
    if throttle.caches_refusals and deleted:
        click.echo("App servers' block caches may go on refusing it for up to 1 second.")
