"""The CLI's and the dashboard's rows, a reset, and what an operator typed: plain values and ValueError."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from flask import current_app
from werkzeug.routing import Rule

from .._request.identity import parse_identity, spec_kinds, spec_name
from .._request.plan import PlannedLimit
from .._request.sources import blueprints_of
from .._request.state import RateLimitState
from ..core.engine.keys import Identity, loggable
from ..core.engine.rates import Layer
from ..core.engine.throttle import Throttle
from ..core.stores.overrides import Change, Override
from ..core.stores.refusals import Refusal
from ..core.stores.usage import usage
from ..decorators import exemption_of
from .console import duration, utc

#: The columns of ``flask ratelimit limits``, and of the dashboard's limits.
LIMITS_HEADER = ("RULE", "METHODS", "ENDPOINT", "LIMIT", "STRATEGY", "SCOPE", "IDENTITIES")


@dataclass(frozen=True)
class RouteLimits:
    """A rule of the app, its methods (of :func:`methods_of`) that have the same limits, and those limits."""

    rule: Rule
    methods: tuple[str, ...]
    limits: tuple[PlannedLimit, ...]


def route_limits(state: RateLimitState, endpoint: str | None = None, method: str | None = None) -> list[RouteLimits]:
    """The current app's routes with their limits, methods with the same limits together; only ``endpoint``'s,
    or ``method``, if given.

    :raises KeyError: if the app has no endpoint ``endpoint``.
    """
    found: list[RouteLimits] = []
    for rule in sorted(current_app.url_map.iter_rules(endpoint), key=lambda rule: (rule.rule, rule.endpoint)):
        groups: dict[tuple[tuple[str, ...], ...], tuple[list[str], list[PlannedLimit]]] = {}
        for verb in methods_of(rule):
            if method is None or verb == method:
                plan = state.plan(rule.endpoint, verb)
                limits = [] if plan is None else list(plan.limits)
                groups.setdefault(_limit_cells(limits), ([], limits))[0].append(verb)
        found.extend(RouteLimits(rule, tuple(methods), tuple(limits)) for methods, limits in groups.values())
    return found


def limit_rows(state: RateLimitState, limited: bool = False) -> list[tuple[str, ...]]:
    """One row per limit of each route (only limited routes with ``limited``)."""
    rows: list[tuple[str, ...]] = []
    for route in route_limits(state):
        cells = _limit_cells(list(route.limits))
        if limited and not cells:
            continue
        head = (route.rule.rule, ",".join(route.methods), route.rule.endpoint)
        for cell in cells or (("no limit", "", "", ""),):
            rows.append((*head, *cell))
            head = ("", "", "")
    return rows


#: The columns of ``flask ratelimit status``, and of the dashboard's lookup.
STATUS_HEADER = ("ENDPOINT", "SCOPE", "STRATEGY", "LAYER", "USED", "REMAINING", "RESETS IN")


def status_rows(
    state: RateLimitState, throttle: Throttle, who: Identity, endpoint: str | None
) -> list[tuple[str, ...]]:
    """What ``who`` has used of each layer that counts it; nothing is counted."""
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


def reset_counters(
    state: RateLimitState, throttle: Throttle, who: Identity, endpoint: str | None
) -> tuple[int, str] | None:
    """Delete ``who``'s counters (every scope, or ``endpoint``'s): how many keys went and a line saying so;
    None if no limit of ``endpoint`` counts ``who``."""
    scopes: list[str | None] = [None]
    where = "every scope"
    if endpoint is not None:
        scopes = list(dict.fromkeys(limit.scope for limit in _counting(state, endpoint, who)))
        if not scopes:
            return None
        where = f"scope{'s' * (len(scopes) > 1)} {', '.join(map(repr, scopes))}"
    deleted = throttle.reset(who, scopes)
    return deleted, f"Deleted {deleted} counter key{'' if deleted == 1 else 's'} of {who} in {where}."


#: The columns of ``flask ratelimit overrides`` and of the dashboard's overrides, then of their changes.
OVERRIDES_HEADER = ("IDENTITY", "SCOPE", "ACTION", "LIMIT", "UNTIL (UTC)", "BY", "SET AT (UTC)")
CHANGES_HEADER = ("TIME (UTC)", "BY", "CHANGE", "OVERRIDE", "UNTIL (UTC)")


def override_rows(overrides: Sequence[Override]) -> list[tuple[str, ...]]:
    return [(o.target, o.scope or "(every scope)", o.action, o.limit, utc(o.until), o.by, utc(o.at)) for o in overrides]


def change_rows(changes: Sequence[Change]) -> list[tuple[str, ...]]:
    return [(utc(c.time), c.by, c.what, c.override, "" if c.until is None else utc(c.until)) for c in changes]


def entry_rows(entries: Sequence[Refusal], who: str, retry: bool) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """A log's header and rows, the deciding identity under ``who``; with ``retry``, the wait."""
    retry_after = ("RETRY AFTER",) if retry else ()
    header = ("TIME (UTC)", "ENDPOINT", "SCOPE", "LAYER", "STRATEGY", who, *retry_after, "ALSO PRESENT")
    rows: list[tuple[str, ...]] = []
    for entry in entries:
        head = (utc(entry.time), entry.endpoint, entry.scope, entry.layer, entry.strategy, loggable(entry.identity))
        wait = (duration(entry.retry_after),) if retry else ()
        rows.append((*head, *wait, ", ".join(map(loggable, entry.others))))
    return header, rows


def find_identity(text: str, state: RateLimitState) -> Identity:
    """The identity written as ``text`` (a key function by its short name too), or a :class:`ValueError`."""
    kinds = {
        spec_name(spec)
        for endpoint in current_app.view_functions
        for limit in _endpoint_limits(state, endpoint)
        for spec in limit.identities
        if not isinstance(spec, str)
    }
    return parse_identity(text, state.settings.ipv6_prefix, sorted(kinds))


def find_endpoint(name: str | None) -> str | None:
    """``name``, if None (every endpoint) or the app's; else a :class:`ValueError` naming the closest ones."""
    if name is not None and name not in current_app.view_functions:
        close = difflib.get_close_matches(name, current_app.view_functions, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else "; `flask ratelimit limits` lists them"
        raise ValueError(f"no endpoint {name!r}{hint}")
    return name


def methods_of(rule: Rule) -> list[str]:
    """The methods of ``rule`` without Flask's automatic HEAD and OPTIONS, never limited."""
    methods = set(rule.methods or ())
    if "GET" in methods:
        methods.discard("HEAD")
    if getattr(rule, "provide_automatic_options", False):
        methods.discard("OPTIONS")
    return sorted(methods)


def _endpoint_limits(state: RateLimitState, endpoint: str) -> list[PlannedLimit]:
    """Each limit of ``endpoint``'s methods once."""
    methods = {method for rule in current_app.url_map.iter_rules(endpoint) for method in methods_of(rule)}
    found: dict[tuple[object, ...], PlannedLimit] = {}
    for method in sorted(methods) or ["GET"]:
        plan = state.plan(endpoint, method)
        for limit in () if plan is None else plan.limits:
            layers = limit.policy.layers if limit.policy is not None else limit.spec.limit
            found.setdefault((layers, limit.scope, limit.strategy, limit.identities), limit)
    return list(found.values())


def _counting(state: RateLimitState, endpoint: str, identity: Identity) -> list[PlannedLimit]:
    return [limit for limit in _endpoint_limits(state, endpoint) if identity.kind in counted_kinds(limit)]


def counted_kinds(limit: PlannedLimit) -> tuple[str, ...]:
    """The kinds of identity ``limit`` counts: ``("user", "ip")`` for ``user-or-ip``."""
    return tuple(dict.fromkeys(kind for spec in limit.identities for kind in spec_kinds(spec)))


def is_exempt(endpoint: str) -> bool:
    """Whether the view of ``endpoint``, or a blueprint it is in, has an exemption."""
    app = current_app
    holders = [app.view_functions[endpoint], *(app.blueprints[name] for name in blueprints_of(app, endpoint))]
    return any(exemption_of(holder) is not None for holder in holders)


def nothing_counts(state: RateLimitState, endpoint: str | None, identity: Identity) -> str:
    if endpoint is None:
        return f"No limit of this app counts {identity.kind} identities."
    if not _endpoint_limits(state, endpoint):
        return f"Endpoint {endpoint!r} has no limits."
    return f"No limit of endpoint {endpoint!r} counts {identity.kind} identities."


def _limit_cells(limits: list[PlannedLimit]) -> tuple[tuple[str, ...], ...]:
    return tuple(
        (_limit_text(limit), limit.strategy, limit.scope, ", ".join(map(spec_name, limit.identities)))
        for limit in limits
    )


def _limit_text(limit: PlannedLimit) -> str:
    """The layers (or a dynamic limit's function), its cap, shadow mode and source."""
    if limit.policy is None:
        text = f"dynamic: {getattr(limit.spec.limit, '__qualname__', 'function')}()"
    else:
        text = ";".join(_layer(layer) for layer in limit.policy.layers)
    caps = limit.slots.layers if limit.slots is not None else ()
    notes = [f"{cap.quota} concurrent, lease {cap.window}s" for cap in caps]
    notes += [note for note in (limit.shadow and "shadow", limit.source != "view" and limit.source) if note]
    return f"{text} ({', '.join(notes)})" if notes else text


def _layer(layer: Layer) -> str:
    return f"{layer.quota}/{layer.name}"
