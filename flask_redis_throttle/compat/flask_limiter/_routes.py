"""What the ``flask limiter`` commands show and clear: every route's limits
as the extension planned them, grouped as Flask-Limiter's commands group
them (the meta limits, the application limits, then each route by
blueprint), what one key has used of each, and their counters cleared.

Nothing here decides a request: the limits are the extension's plans
(:meth:`RateLimitState.plan <flask_redis_throttle._state.RateLimitState.plan>`),
what a key has used is read at cost 0 (:func:`~flask_redis_throttle.core.usage.usage`),
and clearing is :meth:`Throttle.reset <flask_redis_throttle.core.throttle.Throttle.reset>`
on the limits' scopes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from flask import Flask, Request, current_app, request
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect, Rule

from ...cli import counted_kinds, duration, is_exempt, parse_identity, route_limits
from ...core.keys import Identity
from ...core.throttle import Policy, StorageUnavailable, Throttle
from ...core.usage import LayerUsage, usage
from ...extension import PlannedLimit, RateLimitState, qualified_name
from ._tree import Node

__all__ = ["Key", "Route", "Shown", "Survey", "match_endpoint"]


#: The labels of a limit's entries, one per layer: :meth:`Shown.labels`, or :meth:`Key.states`.
Entry = Callable[["Shown"], list[str]]


class NotMatched(ValueError):
    """An ``--endpoint`` or ``--path`` that names no route of the app."""


def match_endpoint(app: Flask, endpoint: str | None, path: str | None, method: str | None) -> str | None:
    """The endpoint ``--endpoint`` or ``--path`` (with ``--method``) names; None for every endpoint.

    :raises NotMatched: if it names none, saying so.
    """
    if endpoint is not None:
        if endpoint not in app.view_functions:
            raise NotMatched(f"endpoint {endpoint} not found; `flask limiter limits` lists every route")
        return endpoint
    if path is None:
        return None
    parts = urlsplit(path)
    adapter = app.url_map.bind("localhost")
    try:
        try:
            found, _ = adapter.match(parts.path, method=method, query_args=parts.query)
        except RequestRedirect as redirect:  # /health for /health/: the route it redirects to
            found, _ = adapter.match(urlsplit(redirect.new_url).path, method=method)
    except (NotFound, MethodNotAllowed):
        raise NotMatched(f"{method or 'GET'}: {path} could not be matched to any route") from None
    return str(found)


@dataclass(frozen=True)
class Shown:
    """One limit of a route as the commands show it.

    :param limit: the extension's planned limit.
    :param policy: its policy for a request to the route; None when it is
        dynamic and its function could not say outside a real request, or
        returned no limit.
    :param scope: the scope its counters are kept under; None when a scope
        function gives each request its own.
    :param note: why ``policy`` is None, if it is.
    :param beneath: for a dynamic limit of the shim, which counts each of
        its strings in a scope of its own, ``beneath:string``: the scope
        they are all beneath, which :meth:`Key.clear` clears.
    """

    limit: PlannedLimit
    policy: Policy | None
    scope: str | None
    note: str = ""
    beneath: str | None = None

    @classmethod
    def of(cls, limit: PlannedLimit, asked: Request) -> Shown:
        """``limit`` as it stands for ``asked``, a request made up for the route."""
        scope = None if callable(limit.spec.scope) else limit.scope
        beneath = getattr(limit.spec.scope, "beneath", None)  # see Dynamic.apart
        if beneath == "":
            beneath = asked.endpoint
        if limit.policy is not None:
            return cls(limit, limit.policy, scope)
        try:
            policy = limit.resolve(asked)
        except Exception as error:  # the app's function, called outside a real request
            return cls(limit, None, scope, f"not known outside a request: {type(error).__name__}", beneath)
        if policy is None:
            _, _, raised = getattr(limit.spec.limit, "last", (None, None, None))
            if raised is not None:  # a shim's dynamic limit: it logged the error
                return cls(limit, None, scope, f"not known outside a request: {type(raised).__name__}", beneath)
            return cls(limit, None, scope, "no limit for a request without headers", beneath)
        return cls(limit, policy, policy.scope, beneath=beneath)

    @property
    def signature(self) -> tuple[object, ...]:
        """What tells this limit apart from another method's: its layers and scope."""
        layers = self.policy.layers if self.policy is not None else self.limit.spec.limit
        return (layers, self.scope, self.limit.strategy)

    def labels(self, details: bool = True) -> list[str]:
        """One label per layer, as ``5 per 1 minute``; with ``details``, the
        options that change how it counts."""
        notes = self.notes() if details else []
        suffix = f" ({', '.join(notes)})" if notes else ""
        if self.policy is None:
            return [f"dynamic: {qualified_name(self.limit.spec.limit)}(), {self.note}{suffix}"]
        return [f"{layer}{suffix}" for layer in self.policy.layers]

    def notes(self) -> list[str]:
        """What sets the limit apart: its function, its scope when it is not
        the endpoint's, its cost, its ``exempt_when`` and ``deduct_when``."""
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
        if self.limit.shadow:
            notes.append("shadow")
        return notes


@dataclass
class Route:
    """One rule of the app, with its own limits (not the application's nor
    the meta limits), methods with the same limits together.

    :param exempt: whether an exemption drops inherited limits from it.
    """

    rule: Rule
    groups: list[tuple[list[str], list[Shown]]]
    exempt: bool

    @property
    def label(self) -> str:
        return f"{self.rule.endpoint}: {self.rule.rule}"

    @property
    def blueprint(self) -> str:
        endpoint: str = self.rule.endpoint
        return endpoint.rpartition(".")[0]


@dataclass
class Survey:
    """The limits of the app's routes, or of one endpoint's, as the commands show them.

    :param routes: each rule with its own limits, in the order of their paths.
    :param application: the application limits, each once.
    :param meta: the meta limits, each once.
    """

    routes: list[Route] = field(default_factory=list)
    application: dict[tuple[object, ...], Shown] = field(default_factory=dict)
    meta: dict[tuple[object, ...], Shown] = field(default_factory=dict)

    @classmethod
    def of(cls, state: RateLimitState, endpoint: str | None, method: str | None) -> Survey:
        """The limits of ``endpoint``'s rules (every rule's if None) for
        ``method`` (every method of each rule if None), as ``flask ratelimit
        limits`` finds them (:func:`~flask_redis_throttle.cli.route_limits`).
        Static files have none."""
        survey = cls()
        for route in route_limits(state, endpoint, method):
            rule = route.rule
            if rule.endpoint == "static" or rule.endpoint.endswith(".static"):
                continue
            if not survey.routes or survey.routes[-1].rule is not rule:
                survey.routes.append(Route(rule, [], is_exempt(rule.endpoint)))
            own = survey._place(rule, route.methods[0], route.limits)
            if own:
                survey.routes[-1].groups.append((list(route.methods), own))
        return survey

    def _place(self, rule: Rule, method: str, limits: Iterable[PlannedLimit]) -> list[Shown]:
        """The route's own limits of ``limits``; its application and meta limits go to the survey's."""
        own = []
        # A dynamic limit, or a scope function, is asked as for a request
        # without headers to the route: to / for a route with variable
        # parts, but with the route's rule, hence its endpoint.
        with current_app.test_request_context("/" if rule.arguments else rule.rule, method=method):
            request.url_rule, request.view_args = rule, {}
            for limit in limits:
                shown = Shown.of(limit, request)
                if limit.meta:
                    self.meta.setdefault(shown.signature, shown)
                elif limit.source == "RATELIMIT_APPLICATION":
                    self.application.setdefault(shown.signature, shown)
                else:
                    own.append(shown)
        return own

    def every(self, everywhere: bool) -> Iterable[Shown]:
        """Every limit the survey shows: with ``everywhere``, the meta and application limits too."""
        if everywhere:
            yield from self.meta.values()
            yield from self.application.values()
        for route in self.routes:
            for _, group in route.groups:
                yield from group

    def trees(self, entry: Entry, everywhere: bool, app_name: str, limited: bool = False) -> list[Node]:
        """The survey as trees: with ``everywhere``, the meta and application
        limits first; then the routes, one tree per blueprint (the app's own
        routes under the app's name).

        :param entry: the labels of a limit's entries.
        :param limited: leave out the routes without limits of their own.
        """
        trees = []
        if everywhere:
            for title, limits in (("Meta limits", self.meta), ("Application limits", self.application)):
                if limits:
                    trees.append(_limits_node(title, limits.values(), entry))
        groups: dict[str, Node] = {}
        for route in self.routes:
            if limited and not route.groups:
                continue
            name = route.blueprint or app_name
            node = groups.get(name) or groups.setdefault(name, Node(name))
            routed = node.add(route.label)
            if not route.groups:
                routed.add("Exempt" if route.exempt else "No limits")
            elif len(route.groups) == 1:
                for shown in route.groups[0][1]:
                    for label in entry(shown):
                        routed.add(label)
            else:
                for methods, group in route.groups:
                    routed.children.append(_limits_node(", ".join(methods), group, entry))
        return [*trees, *groups.values()]


def _limits_node(title: str, limits: Iterable[Shown], entry: Entry) -> Node:
    node = Node(title)
    for shown in limits:
        for label in entry(shown):
            node.add(label)
    return node


@dataclass
class Key:
    """What ``--key`` names: the value a key function returns, as the
    identity of each kind a limit counts (an IP address for
    ``get_remote_address``).

    :param value: the key.
    :param throttle: the app's throttle; None when rate limiting is disabled.
    """

    value: str
    state: RateLimitState
    throttle: Throttle | None
    #: Why the storage could not answer, once it did not: then nothing more is asked.
    down: str | None = None
    #: Whether the key is an identity some limit counts.
    counted: bool = False
    #: Why the key was no identity of a kind a limit counts, the last time it was not.
    problem: str | None = None

    @property
    def unknown(self) -> str | None:
        """Why no limit counts the key, if none does and one could have."""
        return None if self.counted else self.problem

    def identities(self, shown: Shown) -> list[Identity]:
        """The identities ``value`` is, of the kinds ``shown`` counts; none for
        a kind it cannot be (a key that is no IP address, for ``ip``)."""
        found = []
        for kind in counted_kinds(shown.limit):
            try:
                found.append(parse_identity(f"{kind}:{self.value}", self.state.settings.ipv6_prefix))
            except ValueError as error:
                self.problem = str(error)
        self.counted = self.counted or bool(found)
        return found

    def states(self, shown: Shown) -> list[str]:
        """One label per layer of ``shown``: whether the key's next request
        would pass it, and how much of it remains."""
        labels = shown.labels()
        if shown.policy is None:
            return labels
        identities = self.identities(shown)
        if not identities:
            return [f"{label}: not counted for key {self.value}" for label in labels]
        layers = self._usage(shown.policy, identities)
        if layers is None:
            return [f"{label}: Storage not available" for label in labels]
        return [f"{label}: {_state(layer)}" for label, layer in zip(labels, layers, strict=True)]

    def cleared(self, shown: Shown) -> list[str]:
        """One label per layer of ``shown``, saying whether :meth:`clear` clears it."""
        labels = shown.labels(details=False)
        if shown.scope is None and shown.beneath is None:
            return [f"{label}: not cleared, its scope function gives each request its own" for label in labels]
        if not self.identities(shown):
            return [f"{label}: not counted for key {self.value}" for label in labels]
        return [f"{label}: Cleared" for label in labels]

    def clear(self, limits: Iterable[Shown]) -> int:
        """Delete the key's counters of ``limits``, scope by scope, and
        forget this process's cached refusals of it.

        :returns: how many counter keys were deleted.
        :raises redis.RedisError: if Redis cannot answer.
        """
        assert self.throttle is not None
        throttle = self.throttle
        scopes: dict[Identity, dict[str, None]] = {}
        beneath: dict[Identity, dict[str, None]] = {}
        for shown in limits:
            by, scope = (beneath, shown.beneath) if shown.beneath is not None else (scopes, shown.scope)
            if scope is not None:
                for identity in self.identities(shown):
                    by.setdefault(identity, {})[scope] = None
        return sum(throttle.reset(identity, list(found)) for identity, found in scopes.items()) + sum(
            throttle.reset(identity, list(found), beneath=True) for identity, found in beneath.items()
        )

    def _usage(self, policy: Policy, identities: Sequence[Identity]) -> list[LayerUsage] | None:
        """Each layer of ``policy`` as the most used of ``identities`` has
        used it; None if the storage cannot say."""
        throttle = self.throttle
        if throttle is None:
            self.down = "rate limiting is disabled (RATELIMIT_ENABLED is False)"
        if throttle is None or self.down is not None:
            return None
        try:
            per_identity = [usage(throttle, policy, identity) for identity in identities]
        except StorageUnavailable as error:
            self.down = str(error.__cause__ or error)
            return None
        return [min(layers, key=lambda layer: layer.remaining) for layers in zip(*per_identity, strict=True)]


def _state(layer: LayerUsage) -> str:
    """Whether the next request would pass ``layer``, what remains of it, and when it is full again."""
    verdict = "Pass" if layer.remaining > 0 else "Fail"
    full = f", full again in {duration(layer.reset)}" if layer.reset else ""
    return f"{verdict} ({layer.remaining} out of {layer.layer.quota} remaining){full}"
