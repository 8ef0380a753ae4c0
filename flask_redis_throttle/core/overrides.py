"""Overrides set at run time: other layers for one identity, an allowed
identity, a blocked one; kept in storage, and followed by every process.

An :class:`Override` names an identity (or, for IPs, a network), a scope or
every scope, what to do, and until when. :class:`OverrideStore` keeps them
in one hash, ``<prefix>{overrides}``, one field each, with a ``~version``
field that every change sets anew; and each change in a capped stream,
``<prefix>{overrides}:log``. The braces put both in one cluster slot. The
hash expires when its last override does, and every reader ignores an
override whose time has passed, so nothing outlives what it was set for.
Each change is one script call (``lua/overrides.lua``): its fields, the
version, the expiry and its log entries are written together, or, if any
of it would fail, none is. An override ends at most :data:`LONGEST`
ahead, which :meth:`OverrideStore.put` checks before anything is sent.

Each process keeps a :class:`OverrideTable`, a snapshot, in memory; its
:class:`OverrideFollower` asks the storage for the version at most once a
second, and for the whole hash only when the version changed. Deciding a
request against the snapshot is a dict lookup per identity, plus a test of
the address against the networks when there are any.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from importlib.resources import files
from typing import Any

from .bounded import remember
from .keys import Identity
from .rates import Layer, parse_limits

__all__ = [
    "ACTIONS",
    "LONGEST",
    "LONGEST_YEARS",
    "REFRESH_INTERVAL",
    "Change",
    "Override",
    "OverrideFollower",
    "OverrideStore",
    "OverrideTable",
    "check_end",
    "network_of",
]

#: What an override does: decide the identity against other layers, let it
#: through unlimited, or refuse it.
ACTIONS = ("limit", "allow", "block")
#: How often, at most, a process asks the storage whether overrides changed, in seconds.
REFRESH_INTERVAL = 1.0
#: The field of the hash that changes with every change.
VERSION_FIELD = "~version"
#: How far ahead, at most, an override ends, in years, and in seconds:
#: ten years, leap days included.
LONGEST_YEARS = 10
LONGEST = 3653 * 86_400
#: How many networks' lookups a table keeps, by address.
NETWORK_CACHE_SIZE = 4096

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Override:
    """One override.

    :param action: ``"limit"``, ``"allow"`` or ``"block"`` (see :data:`ACTIONS`).
    :param target: whom it applies to, written as ``str(identity)`` writes
        an identity (``user:42``), or an IP network (``ip:203.0.113.0/24``).
    :param scope: the scope it applies to; None for every scope.
    :param until: when it ends, in seconds since the epoch.
    :param layers: the layers the identity is decided against, for ``"limit"``.
    :param network: whether ``target`` is a network of several clients.
    :param by: who set it.
    :param at: when it was set, in seconds since the epoch.
    """

    action: str
    target: str
    scope: str | None
    until: float
    layers: tuple[Layer, ...] = ()
    network: bool = False
    by: str = ""
    at: float = 0.0

    @property
    def field(self) -> str:
        """Its field in the hash: one override per target and scope, so a
        new one for the same replaces the old."""
        return f"{self.scope or '*'}\0{self.target}"

    @property
    def limit(self) -> str:
        """Its layers as a limit string, such as ``100/1s;10000/1h``; empty for no layers."""
        return ";".join(f"{layer.quota}/{layer.name}" for layer in self.layers)

    def describe(self) -> str:
        """What it does, in words, for the log and the lists."""
        where = f"scope {self.scope!r}" if self.scope is not None else "every scope"
        what = {"limit": f"limited to {self.limit}", "allow": "allowed", "block": "blocked"}[self.action]
        return f"{self.target} {what} on {where}"

    def encode(self) -> str:
        return json.dumps(
            {
                "action": self.action,
                "target": self.target,
                "scope": self.scope,
                "until": self.until,
                "limit": self.limit,
                "network": self.network,
                "by": self.by,
                "at": self.at,
            }
        )

    @classmethod
    def decode(cls, raw: str | bytes) -> Override | None:
        """The override a field holds; None if it holds none (written by
        another version, or by hand), which readers skip."""
        try:
            data = json.loads(raw)
            limit = data["limit"]
            return cls(
                action=data["action"],
                target=data["target"],
                scope=data["scope"],
                until=float(data["until"]),
                layers=parse_limits(limit) if limit else (),
                network=bool(data["network"]),
                by=str(data["by"]),
                at=float(data["at"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Change:
    """One change, as the log keeps it.

    :param time: when, in seconds since the epoch.
    :param by: who made it.
    :param what: ``"set"``, ``"removed"`` or ``"cleared"``.
    :param override: what was set or removed, in words.
    :param until: when the override set ends; None for a removal.
    """

    time: float
    by: str
    what: str
    override: str
    until: float | None


def network_of(value: str) -> Network:
    """The IP network ``value`` writes, such as ``203.0.113.0/24``.

    :raises ValueError: if it is none, or has host bits set.
    """
    return ipaddress.ip_network(value, strict=True)


class OverrideTable:
    """The overrides in force, in memory, for lookups on every request.

    :param overrides: the overrides; those whose time has passed at ``now`` are left out.
    :param now: the time, in seconds since the epoch.
    """

    def __init__(self, overrides: Iterable[Override] = (), now: float = 0.0) -> None:
        live = sorted((o for o in overrides if o.until > now), key=lambda o: (o.target, o.scope or ""))
        #: Every override in force, by target and scope.
        self.overrides: tuple[Override, ...] = tuple(live)
        #: The overrides of one identity, by ``(kind, value)``.
        self.exact: dict[tuple[str, str], list[Override]] = {}
        #: The overrides of networks, with their networks.
        self.networks: list[tuple[Network, Override]] = []
        #: How each override ranks against the others that name the same
        #: identity (see :meth:`find`), worked out once.
        self._ranks: dict[Override, tuple[bool, bool, int]] = {}
        for override in live:
            # Split as requests' identities are, a key function's kind and all.
            who = Identity.written(override.target)
            width = 129  # an identity is narrower than any network
            if override.network:
                network = network_of(who.value)
                self.networks.append((network, override))
                width = network.prefixlen
            else:
                self.exact.setdefault((who.kind, who.value), []).append(override)
            self._ranks[override] = (override.action == "block", override.scope is not None, width)
        self._within: dict[str, tuple[Override, ...]] = {}
        #: The earliest end of an override, after which the table is out of date.
        self.ends = min((o.until for o in live), default=float("inf"))

    def find(self, identity: Identity, scope: str) -> Override | None:
        """The override that decides ``identity`` under ``scope``, if any.

        A block wins over anything else; then one for this scope over one
        for every scope; then one for the identity over one for a network
        it is in, and a narrower network over a wider one.
        """
        found = self.exact.get((identity.kind, identity.value))
        if self.networks and identity.kind == "ip":
            within = self._in_networks(identity.value)
            if within:
                found = [*(found or ()), *within]
        if not found:
            return None
        best: Override | None = None
        best_rank: tuple[bool, bool, int] = (False, False, -1)
        for override in found:
            if override.scope is not None and override.scope != scope:
                continue
            rank = self._ranks[override]
            if best is None or rank > best_rank:
                best, best_rank = override, rank
        return best

    def _in_networks(self, value: str) -> tuple[Override, ...]:
        """The overrides of the networks an address (or IPv6 group) is in."""
        known = self._within.get(value)
        if known is not None:
            return known
        try:
            # An IPv4 address, or the IPv6 network a client is grouped in.
            client = ipaddress.ip_network(value, strict=False)
        except ValueError:
            return ()  # no address: what a proxy sent
        within = tuple(
            override
            for network, override in self.networks
            if network.version == client.version and client.subnet_of(network)  # type: ignore[arg-type]
        )
        if len(value) <= 64:
            remember(self._within, value, within, NETWORK_CACHE_SIZE)
        return within


class OverrideStore:
    """The overrides in storage, and the log of their changes.

    :param client: the Redis client (the embedded one for ``memory://``),
        or a cluster client: every key is in one slot.
    :param prefix: the key prefix.
    :param log_size: how many changes the log keeps, about.
    :param clock: the time in seconds since the epoch.
    """

    def __init__(self, client: Any, prefix: str, log_size: int = 1000, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.key = prefix + "{overrides}"
        self.log_key = self.key + ":log"
        self.log_size = log_size
        self.clock = clock

    def version(self) -> bytes | None:
        """The version of the overrides: it changes with each change."""
        value: bytes | None = self.client.execute_command("HGET", self.key, VERSION_FIELD)
        return value

    def load(self) -> tuple[bytes | None, list[Override]]:
        """The version and every override in force."""
        raw = self.client.hgetall(self.key)
        version = raw.pop(VERSION_FIELD.encode(), None)
        now = self.clock()
        found = [o for o in map(Override.decode, raw.values()) if o is not None and o.until > now]
        return version, found

    def put(self, override: Override) -> None:
        """Store ``override``, replacing any for the same target and scope,
        and log it: in one step, with the hash's expiry.

        :raises ValueError: if its end is not in the future, or more than
            :data:`LONGEST` ahead; nothing is written then.
        """
        now = self.clock()
        check_end(override.until, now)
        self._change(
            now, override.by, "set", override.field, override.encode(), override.describe(), repr(override.until)
        )

    def remove(
        self, target: str | None, scope: str | None = None, *, every_scope: bool = True, by: str = ""
    ) -> list[Override]:
        """Remove the overrides of ``target`` (every target if None) on
        ``scope``, or on any scope when ``every_scope``; log each.

        :returns: the overrides removed.
        """
        _version, found = self.load()
        gone = [o for o in found if (target is None or o.target == target) and (every_scope or o.scope == scope)]
        if not gone:
            return []
        # Another writer may have removed some since they were read: each
        # is logged, and returned, only by the one that removed it.
        removed = self._change(self.clock(), by, "removed", *(part for o in gone for part in (o.field, o.describe())))
        return [override for override, there in zip(gone, removed, strict=True) if there]

    def changes(self, count: int = 20) -> list[Change]:
        """The latest changes, newest first."""
        entries = self.client.xrevrange(self.log_key, "+", "-", count=count)
        return [_change(fields) for _entry_id, fields in entries]

    def _change(self, now: float, by: str, what: str, *fields: str) -> Any:
        """Make one change (see ``lua/overrides.lua``), with a new version,
        the hash's expiry and its log entries, all in one script call."""
        args = (repr(now), _token(), self.log_size, by, what, LONGEST, *fields)
        return self.client.eval(_script(), 2, self.key, self.log_key, *args)


@cache
def _script() -> str:
    return (files(__package__) / "lua" / "overrides.lua").read_text("utf-8")


def check_end(until: float, now: float) -> None:
    """Check an override's end, ``until``, set at ``now`` (both in seconds
    since the epoch).

    :raises ValueError: unless it is in the future and at most
        :data:`LONGEST` ahead. An end past that is a slip (a year's digits
        typed twice, a span in the wrong unit), and stored it would have to
        be written as an expiry Redis can hold.
    """
    if not until > now:  # NaN too
        raise ValueError(f"the end, {_moment(until)}, is not in the future (now is {_moment(now)})")
    if until - now > LONGEST:
        raise ValueError(
            f"the end, {_moment(until)}, is more than {LONGEST_YEARS} years ahead (now is {_moment(now)}):"
            " an override lasts at most that long"
        )


def _moment(seconds: float) -> str:
    """A time for a message, as ``2027-12-31 00:00:00 UTC``; one no calendar
    holds as a number of seconds since the epoch."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return f"{seconds!r} seconds since the epoch"


def _token() -> str:
    return os.urandom(8).hex()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _change(raw: dict[Any, Any]) -> Change:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    until = fields.get("until")
    return Change(
        time=float(fields.get("time", 0)),
        by=fields.get("by", ""),
        what=fields.get("what", ""),
        override=fields.get("override", ""),
        until=float(until) if until else None,
    )


@dataclass
class OverrideFollower:
    """This process's copy of the overrides, asked again at most once every
    :data:`REFRESH_INTERVAL` seconds.

    :param load: returns the version and the overrides (see :meth:`OverrideStore.load`).
    :param version: returns the version alone (see :meth:`OverrideStore.version`).
    :param clock: the time in seconds since the epoch, to drop the overrides
        whose time has passed.
    :param failed: told of a failure to read them, and whether the read
        before failed too; the last copy stays in force.
    :param ready: whether to ask now; when it says no, the copy in hand
        stays, and it is asked again a second later.
    """

    load: Callable[[], tuple[bytes | None, Sequence[Override]]]
    version: Callable[[], bytes | None]
    clock: Callable[[], float] = time.time
    failed: Callable[[Exception, bool], None] = lambda error, again: None
    ready: Callable[[], bool] = lambda: True
    monotonic: Callable[[], float] = time.monotonic
    #: The overrides in force, as last read.
    table: OverrideTable = field(default_factory=OverrideTable)
    _seen: bytes | None = None
    _loaded: bool = False
    _failing: bool = False
    _due: float = float("-inf")

    def current(self) -> OverrideTable:
        """The table, read again first if it was read over a second ago.

        One request per second and process pays that read: one ``HGET``,
        and an ``HGETALL`` when something changed. The others pay one
        clock reading."""
        if self.monotonic() >= self._due:
            self.refresh()
        table = self.table
        if table.overrides and table.ends <= self.clock():
            self.table = table = OverrideTable(table.overrides, self.clock())
        return table

    def refresh(self, force: bool = False) -> None:
        """Read the version, and the overrides if it changed (or if ``force``)."""
        # Due again in a second, before asking: the other threads of the
        # process go on with the copy in hand meanwhile. (No lock: one a
        # fork could leave held would stop the child from ever asking.)
        self._due = self.monotonic() + REFRESH_INTERVAL
        if not self.ready():
            return
        try:
            if force or not self._loaded or self.version() != self._seen:
                version, overrides = self.load()
                self.table, self._seen, self._loaded = OverrideTable(overrides, self.clock()), version, True
            self._failing = False
        except Exception as error:  # Redis's failure, or a bug: keep the last copy
            self.failed(error, self._failing)
            self._failing = True
