"""Overrides set at run time: other layers for one identity, an allowed
identity, a blocked one; kept in storage (:class:`OverrideStore`: one hash,
each change one script call, ``lua/overrides.lua``), and followed by every
process (:class:`OverrideFollower`, keeping an :class:`OverrideTable` in
memory, asked again at most once a second). :doc:`/overrides` tells how
they are stored, followed and looked up.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from ..bounded import remember
from ..engine.keys import Identity
from ..engine.rates import Layer, parse_limits
from ..engine.scripts import lua_text

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
    "refuse_zone",
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
#: How many addresses' lookups in the networks a table keeps: a client seen
#: again skips reading its address; a new one costs a lookup per prefix
#: length in use, so forgetting them all when full costs little.
NETWORK_CACHE_SIZE = 4096

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: The IPv4-mapped IPv6 addresses: their clients are counted by their IPv4 address.
MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


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
    def read(cls, raw: str | bytes) -> Override:
        """The override a field holds, every part checked for its type.

        :raises ValueError: saying what cannot be read: a field written by
            another version (in a rolling upgrade), or by hand.
        """
        try:
            data = json.loads(raw)
        except (ValueError, TypeError, RecursionError):
            raise ValueError("it is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("it is not a JSON object")
        action, target, scope, limit, network = (data.get(k) for k in ("action", "target", "scope", "limit", "network"))
        if action not in ACTIONS:
            raise ValueError(f"its action {_shown(action)} is not one of {', '.join(ACTIONS)}")
        if not isinstance(target, str) or ":" not in target:
            raise ValueError(f"its target {_shown(target)} is not an identity such as user:42 or ip:203.0.113.0/24")
        if scope is not None and not isinstance(scope, str):
            raise ValueError(f"its scope {_shown(scope)} is neither text nor null")
        if not isinstance(network, bool):
            raise ValueError(f"its network {_shown(network)} is neither true nor false")
        if network:
            kind, _colon, value = target.partition(":")
            if kind != "ip":
                raise ValueError(f"its target {_shown(target)} is a network, but not of IP addresses")
            network_of(value)  # raises ValueError saying why it is none
        if not isinstance(limit, str):
            raise ValueError(f"its limit {_shown(limit)} is not text")
        layers = parse_limits(limit) if action == "limit" else ()  # InvalidLimit is a ValueError
        by = data.get("by", "")
        if not isinstance(by, str):
            raise ValueError(f"its author {_shown(by)} is not text")
        until, at = _stored_time(data.get("until"), "end"), _stored_time(data.get("at", 0.0), "time set")
        return cls(action, target, scope, until, layers, network, by, at)

    @classmethod
    def decode(cls, raw: str | bytes) -> Override | None:
        """The override a field holds; None if it cannot be read (see
        :meth:`read`), which readers skip."""
        try:
            return cls.read(raw)
        except ValueError:
            return None


def _shown(value: Any) -> str:
    """A value read from storage, for a message: short, on one line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _stored_time(value: Any, what: str) -> float:
    """A time read from storage, in seconds since the epoch.

    :raises ValueError: unless it is a finite number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"its {what} {_shown(value)} is not a time in seconds since the epoch")
    return float(value)


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


@lru_cache(maxsize=16384)
def network_of(value: str) -> Network:
    """The IP network ``value`` writes, such as ``203.0.113.0/24``, as
    clients are counted: an IPv4-mapped IPv6 network
    (``::ffff:203.0.113.0/120``) is the IPv4 network it maps
    (``203.0.113.0/24``), since a client with a mapped address is counted
    under its IPv4 address.

    Kept for the next reading of the same overrides: each change has every
    process read them all again, and check each network before its table
    is made of them. (The cache keeps no exceptions.)

    :raises ValueError: saying why, if it is no network; if it has bits set
        after its prefix; if it has a zone id (``fe80::%eth0/64``), which
        names a link of one host, while clients are counted without one; or
        if it is an IPv6 network wider than ``::ffff:0:0/96`` that covers
        mapped addresses, which are counted as IPv4.
    """
    refuse_zone(value)
    address, _slash, _length = value.partition("/")
    try:
        network = ipaddress.ip_network(value, strict=False)
        exact = network.network_address == ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP network such as 203.0.113.0/24 or 2001:db8::/48") from None
    if not exact:
        raise ValueError(f"{value!r} has bits set after its prefix: did you mean {network.with_prefixlen}?")
    if isinstance(network, ipaddress.IPv6Network) and network.overlaps(MAPPED):
        if network.prefixlen < MAPPED.prefixlen:
            raise ValueError(
                f"{value!r} covers the IPv4-mapped addresses ({MAPPED}), whose clients are counted by their "
                "IPv4 address: name the IPv4 network instead"
            )
        return ipaddress.IPv4Network((int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96))
    return network


def refuse_zone(value: str) -> None:
    """Refuse an address or network with a zone id (``fe80::1%eth0``): it
    names a link of one host, and clients are counted without one, so an
    override with it would match no one.

    :raises ValueError: if ``value`` has one, naming what to write instead.
    """
    if "%" in value:
        plain = re.sub(r"%[^/\]]*", "", value)
        raise ValueError(
            f"{value!r} has a zone id, which names a link of one host; clients are counted without one: write {plain}"
        )


class _Networks:
    """The overrides of networks, found for an address by its prefixes:
    one lookup per prefix length in use, however many networks there are.

    :param networks: the overrides, each with its network.
    """

    def __init__(self, networks: Iterable[tuple[Network, Override]] = ()) -> None:
        by_length: dict[tuple[int, int], dict[int, list[Override]]] = {}
        for network, override in networks:
            prefixes = by_length.setdefault((network.version, network.prefixlen), {})
            prefix = int(network.network_address) >> (network.max_prefixlen - network.prefixlen)
            prefixes.setdefault(prefix, []).append(override)
        #: By IP version: each prefix length in use, shortest first, with the
        #: overrides of its networks by their prefix as a number.
        self.lengths: dict[int, tuple[tuple[int, dict[int, list[Override]]], ...]] = {
            version: tuple((length, by_length[v, length]) for v, length in sorted(by_length) if v == version)
            for version in (4, 6)
        }
        self._any = bool(by_length)

    def __bool__(self) -> bool:
        return self._any

    def within(self, client: Network) -> tuple[Override, ...]:
        """The overrides of the networks ``client`` (an address, or the
        IPv6 group a client is counted in) is in."""
        number, length, bits = int(client.network_address), client.prefixlen, client.max_prefixlen
        found: list[Override] = []
        for prefixlen, prefixes in self.lengths[client.version]:
            if prefixlen > length:
                break
            overrides = prefixes.get(number >> (bits - prefixlen))
            if overrides:
                found.extend(overrides)
        return tuple(found)


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
        networks: list[tuple[Network, Override]] = []
        #: How each override ranks against the others that name the same
        #: identity (see :meth:`find`), worked out once.
        self._ranks: dict[Override, tuple[bool, bool, int]] = {}
        for override in live:
            # Split as requests' identities are, a key function's kind and all.
            who = Identity.written(override.target)
            width = 129  # an identity is narrower than any network
            if override.network:
                network = network_of(who.value)
                networks.append((network, override))
                width = network.prefixlen
            else:
                self.exact.setdefault((who.kind, who.value), []).append(override)
            self._ranks[override] = (override.action == "block", override.scope is not None, width)
        #: The overrides of networks, found by prefix.
        self.networks = _Networks(networks)
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
        within = self.networks.within(client)
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
        version, found, _unreadable = self.read()
        return version, found

    def read(self) -> tuple[bytes | None, list[Override], list[str]]:
        """The version, every override in force, and why each field that
        cannot be read is skipped: one field does not keep the others from
        being read."""
        raw = self.client.hgetall(self.key)
        version = raw.pop(VERSION_FIELD.encode(), None)
        now = self.clock()
        found: list[Override] = []
        unreadable: list[str] = []
        for name, value in raw.items():
            try:
                override = Override.read(value)
            except ValueError as error:
                unreadable.append(f"{_text(name).replace(chr(0), ' ')!r}: {error}")
                continue
            if override.until > now:
                found.append(override)
        return version, found, unreadable

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
        return self.client.eval(lua_text("overrides.lua"), 2, self.key, self.log_key, *args)


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
