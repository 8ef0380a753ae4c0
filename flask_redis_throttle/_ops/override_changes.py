"""Overrides as an operator gives them: bad input raises :class:`ValueError` naming it, with nothing stored."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import redis

from .._request.identity import address_group
from .._request.overrides import Overrides
from .._request.state import RateLimitState
from ..core.checks import is_number
from ..core.engine.keys import Identity, cut, loggable
from ..core.engine.rates import Layer, parse_limits
from ..core.engine.throttle import StorageUnavailable
from ..core.stores.overrides import ACTIONS, Change, Override, check_end, network_of, refuse_zone
from .console import parse_moment, parse_span
from .reports import find_identity

#: What every operator's call says when rate limiting is disabled.
DISABLED = "rate limiting is disabled on this app (RATELIMIT_ENABLED is False)"

#: What an operator's call meets when Redis cannot answer.
FAILURES = (StorageUnavailable, redis.RedisError)


def unavailable(error: BaseException, change: bool = False, at: str = "") -> str:
    """The Redis error behind a failed call and, for a ``change`` that timed out, that it may be made all the same."""
    cause = error.__cause__ if isinstance(error, StorageUnavailable) else error
    message = f"rate limit storage unavailable{at}: {cause}"
    if change and isinstance(cause, redis.TimeoutError):
        message += (
            ". The change may have reached Redis all the same, and be made when it answers:"
            " the overrides in force (flask ratelimit overrides, or the dashboard) say whether it was."
        )
    return message


def overrides_of(state: RateLimitState) -> Overrides:
    """The app's overrides; a :class:`RuntimeError` if rate limiting is disabled."""
    if state.overrides is None:
        raise RuntimeError(DISABLED)
    return state.overrides


def set_override(
    state: RateLimitState,
    action: str,
    target: str | Identity,
    limit: str | None,
    scope: str | None = None,
    until: object = None,
    duration: object = None,
    *,
    by: str,
) -> Override:
    """Check and store one override: a :class:`ValueError` naming what is wrong, or one of :data:`FAILURES`."""
    overrides = overrides_of(state)
    now = overrides.now()
    with state.app.app_context():  # a key function may go by its short name
        ends = parse_when(until, duration, now)
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}: expected one of {', '.join(ACTIONS)}")
        name, network = parse_target(target, state)
    if scope is not None:
        known = known_scopes(state)
        if scope not in known:
            listed = ", ".join(map(repr, sorted(known))) or "none: no view has a limit"
            raise ValueError(f"unknown scope {scope!r}: this app's scopes are {listed}")
    layers: tuple[Layer, ...] = ()
    if action == "limit":
        if not isinstance(limit, str) or not limit.strip():
            raise ValueError("an override of the layers needs a limit, such as '100/s;10000/h'")
        layers = parse_limits(limit)  # an InvalidLimit is a ValueError
    elif limit is not None:
        raise ValueError(f"a {action} takes no limit, but {limit!r} was given")
    check_end(ends, now)
    return overrides.put(Override(action, name, scope, ends, layers, network, cut(loggable(by or "unknown")), now))


def lift(
    state: RateLimitState, target: str | Identity | None, scope: str | None, every: bool, by: str
) -> list[Override]:
    """Remove ``target``'s overrides (everyone's if None) on ``scope``, or every scope if ``every``."""
    overrides = overrides_of(state)
    with state.app.app_context():
        name = None if target is None else parse_target(target, state)[0]
    return overrides.remove(name, scope, every, by)


def latest_changes(state: RateLimitState, count: int) -> list[Change]:
    """The latest ``count`` changes of the overrides, newest first."""
    overrides = overrides_of(state)
    return list(overrides.throttle.call(overrides.store.changes, (overrides.store.log_key,), count)) if count else []


def parse_target(target: str | Identity, state: RateLimitState) -> tuple[str, bool]:
    """The target as an override keeps it, and whether it is a network (wider than one client's address group)."""
    if isinstance(target, Identity):
        return str(target), False
    if not isinstance(target, str):
        raise ValueError(f"{target!r} is not an identity: write ip:<address or network>, user:<id> or <key>:<value>")
    text = target.strip()
    if text.startswith("ip:"):
        refuse_zone(text[3:])
    if not (text.startswith("ip:") and "/" in text):
        return str(find_identity(text, state)), False
    value, settings = text[3:], state.settings
    network = network_of(value)  # an IPv4-mapped network as the IPv4 one; no zone
    if network.prefixlen >= (32 if network.version == 4 else settings.ipv6_prefix):
        return f"ip:{address_group(str(network.network_address), settings.ipv6_prefix)}", False
    widest = settings.override_widest_ipv4 if network.version == 4 else settings.override_widest_ipv6
    setting = f"RATELIMIT_OVERRIDE_WIDEST_IPV{network.version}"
    if network.prefixlen < widest:
        named = value if network.with_prefixlen == value else f"{value} ({network.with_prefixlen})"
        raise ValueError(f"{named!r} is wider than /{widest}, the widest network an override may name ({setting})")
    return f"ip:{network.with_prefixlen}", True


def known_scopes(state: RateLimitState) -> set[str]:
    """Every scope a limit of the app counts under."""
    return {
        limit.scope
        for rule in state.app.url_map.iter_rules()
        for method in rule.methods or ()
        if (plan := state.plan(rule.endpoint, method)) is not None
        for limit in plan.limits
    }


def parse_when(until: object, duration: object, now: float) -> float:
    """When an override ends, in epoch seconds (infinite if past a float, for :func:`check_end` to refuse);
    a :class:`ValueError` unless exactly one of ``until`` and ``duration`` is given, well formed."""
    if (until is None) == (duration is None):
        raise ValueError("give one end: until (a time such as 2027-12-31) or a duration (a span such as 2h)")
    if isinstance(duration, timedelta):
        return now + duration.total_seconds()
    if isinstance(duration, str):
        span = parse_span(duration)
        if span is None:
            raise ValueError(f"duration {duration!r} is not a span such as 90s, 2h, 1h30m or 7d")
        duration = span
    if isinstance(until, datetime):
        return (until if until.tzinfo is not None else until.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(until, str):
        if parse_span(until) is not None:
            raise ValueError(f"until {until!r} is a span: give it as the duration, or give a time such as 2027-12-31")
        return parse_moment(until, now)
    given = until if duration is None else duration
    if is_number(given):  # seconds
        try:
            seconds = float(given)
        except OverflowError:  # an int too large
            seconds = math.inf if given > 0 else -math.inf
        if not math.isnan(seconds):
            return seconds if duration is None else now + seconds
    if duration is None:
        raise ValueError(f"until {until!r} is not a time: a datetime, seconds since the epoch, or an ISO time")
    raise ValueError(f"duration {duration!r} is not a span such as 2h, a number of seconds, or a timedelta")
