"""Overrides set at run time, kept in storage and followed by every process; see :doc:`/overrides`."""

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

#: What an override does: other layers, unlimited, or refused.
ACTIONS = ("limit", "allow", "block")
#: How often, at most, a process asks the storage whether overrides changed, in seconds.
REFRESH_INTERVAL = 1.0
#: The field of the hash that changes with every change.
VERSION_FIELD = "~version"
#: How far ahead, at most, an override ends, in years and in seconds (leap days included).
LONGEST_YEARS = 10
LONGEST = 3653 * 86_400
#: How many addresses' lookups in the networks a table keeps: forgetting them all costs little.
NETWORK_CACHE_SIZE = 4096

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: The IPv4-mapped IPv6 addresses: their clients are counted by their IPv4 address.
MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


@dataclass(frozen=True)
class Override:
    """``target`` is ``user:42`` or, with ``network``, ``ip:203.0.113.0/24``; ``scope`` None is every scope;
    ``until`` and ``at`` (when set) are epoch seconds."""

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
        """Its field in the hash: one per target and scope."""
        return f"{self.scope or '*'}\0{self.target}"

    @property
    def limit(self) -> str:
        return ";".join(f"{layer.quota}/{layer.name}" for layer in self.layers)

    def describe(self) -> str:
        where = f"scope {self.scope!r}" if self.scope is not None else "every scope"
        what = {"limit": f"limited to {self.limit}", "allow": "allowed", "block": "blocked"}[self.action]
        return f"{self.target} {what} on {where}"

    def encode(self) -> str:
        return json.dumps({name: getattr(self, name) for name in _FIELDS})

    @classmethod
    def read(cls, raw: str | bytes) -> Override:
        """The override a field holds, every part checked: a :class:`ValueError` says what cannot be read."""
        try:
            data = json.loads(raw)
        except (ValueError, TypeError, RecursionError):
            raise ValueError("it is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("it is not a JSON object")
        read = {}
        for name, (what, default, good, wanted) in _FIELDS.items():
            value = read[name] = data.get(name, default)
            if not good(value):
                raise ValueError(f"its {what} {_shown(value)} {wanted}")
        target = read["target"]
        if read["network"]:
            kind, _colon, value = target.partition(":")
            if kind != "ip":
                raise ValueError(f"its target {_shown(target)} is a network, but not of IP addresses")
            network_of(value)  # raises ValueError saying why it is none
        limit = read.pop("limit")
        layers = parse_limits(limit) if read["action"] == "limit" else ()  # InvalidLimit is a ValueError
        read["until"], read["at"] = float(read["until"]), float(read["at"])  # JSON may hold an int
        return cls(**read, layers=layers)


def _text_or(none: bool) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) or (none and value is None)


def _time(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


_NOT_TIME = "is not a time in seconds since the epoch"
_NOT_IDENTITY = "is not an identity such as user:42 or ip:203.0.113.0/24"
#: Each field of an override's JSON: its name in messages, its default, its check, and what a bad value is not.
_FIELDS: dict[str, tuple[str, Any, Callable[[Any], bool], str]] = {
    "action": ("action", None, ACTIONS.__contains__, f"is not one of {', '.join(ACTIONS)}"),
    "target": ("target", None, lambda value: isinstance(value, str) and ":" in value, _NOT_IDENTITY),
    "scope": ("scope", None, _text_or(none=True), "is neither text nor null"),
    "until": ("end", None, _time, _NOT_TIME),
    "limit": ("limit", None, _text_or(none=False), "is not text"),
    "network": ("network", None, lambda value: isinstance(value, bool), "is neither true nor false"),
    "by": ("author", "", _text_or(none=False), "is not text"),
    "at": ("time set", 0.0, _time, _NOT_TIME),
}


def _shown(value: Any) -> str:
    """A value read from storage, short and on one line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Change:
    """One entry of the log: ``what`` is ``"set"`` or ``"removed"``; ``until`` is None for a removal."""

    time: float
    by: str
    what: str
    override: str
    until: float | None


@lru_cache(maxsize=16384)
def network_of(value: str) -> Network:
    """The IP network ``value`` writes, an IPv4-mapped one as IPv4, or a :class:`ValueError` saying why it is none.
    Cached: each change has every process read every override again."""
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
    """:raises ValueError: for a zone id (``fe80::1%eth0``), naming what to write: clients are counted without one."""
    if "%" in value:
        plain = re.sub(r"%[^/\]]*", "", value)
        raise ValueError(
            f"{value!r} has a zone id, which names a link of one host; clients are counted without one: write {plain}"
        )


class OverrideTable:
    """The overrides in force at ``now``, for lookups on every request (see docs/overrides.rst)."""

    def __init__(self, overrides: Iterable[Override] = (), now: float = 0.0) -> None:
        live = sorted((o for o in overrides if o.until > now), key=lambda o: (o.target, o.scope or ""))
        self.overrides: tuple[Override, ...] = tuple(live)
        #: The overrides of one identity, by ``(kind, value)``.
        self.exact: dict[tuple[str, str], list[Override]] = {}
        by_length: dict[tuple[int, int], dict[int, list[Override]]] = {}
        self._ranks: dict[Override, tuple[bool, bool, int]] = {}
        for override in live:
            who = Identity.written(override.target)
            width = 129  # an identity is narrower than any network
            if override.network:
                network = network_of(who.value)
                width = network.prefixlen
                prefix = int(network.network_address) >> (network.max_prefixlen - width)
                by_length.setdefault((network.version, width), {}).setdefault(prefix, []).append(override)
            else:
                self.exact.setdefault((who.kind, who.value), []).append(override)
            self._ranks[override] = (override.action == "block", override.scope is not None, width)
        #: By IP version: each prefix length in use, shortest first, with its networks' overrides by prefix.
        self.lengths: dict[int, list[tuple[int, dict[int, list[Override]]]]] = {4: [], 6: []}
        for version, length in sorted(by_length):
            self.lengths[version].append((length, by_length[version, length]))
        self._within: dict[str, tuple[Override, ...]] = {}
        self.ends = min((o.until for o in live), default=float("inf"))

    def find(self, identity: Identity, scope: str) -> Override | None:
        """The override that decides: a block first, then one for this scope, then the narrowest target."""
        found = self.exact.get((identity.kind, identity.value), [])
        if identity.kind == "ip" and (self.lengths[4] or self.lengths[6]):
            found = [*found, *self._in_networks(identity.value)]
        candidates = [override for override in found if override.scope in (None, scope)]
        return max(candidates, key=self._ranks.__getitem__, default=None)

    def _in_networks(self, value: str) -> tuple[Override, ...]:
        known = self._within.get(value)
        if known is not None:
            return known
        try:  # an IPv4 address, or the IPv6 network a client is grouped in
            client = ipaddress.ip_network(value, strict=False)
        except ValueError:
            return ()  # no address: what a proxy sent
        number, bits = int(client.network_address), client.max_prefixlen
        within = tuple(
            override
            for length, prefixes in self.lengths[client.version]
            if length <= client.prefixlen
            for override in prefixes.get(number >> (bits - length), ())
        )
        if len(value) <= 64:
            remember(self._within, value, within, NETWORK_CACHE_SIZE)
        return within


class OverrideStore:
    """The overrides in storage, and the log of their changes (about ``log_size``), all in one cluster slot."""

    def __init__(self, client: Any, prefix: str, log_size: int = 1000, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.key = prefix + "{overrides}"
        self.log_key = self.key + ":log"
        self.log_size = log_size
        self.clock = clock

    def version(self) -> bytes | None:
        value: bytes | None = self.client.execute_command("HGET", self.key, VERSION_FIELD)
        return value

    def read(self) -> tuple[bytes | None, list[Override], list[str]]:
        """The version, the overrides in force, and why each unreadable field is skipped."""
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
        """Store and log ``override`` in one step; :func:`check_end` checked its end before."""
        self._change(override.by, "set", override.field, override.encode(), override.describe(), repr(override.until))

    def remove(
        self, target: str | None, scope: str | None = None, *, every_scope: bool = True, by: str = ""
    ) -> list[Override]:
        """Remove, log and return ``target``'s overrides (everyone's if None) on ``scope`` or any if ``every_scope``."""
        _version, found, _unreadable = self.read()
        gone = [o for o in found if (target is None or o.target == target) and (every_scope or o.scope == scope)]
        if not gone:
            return []
        # Only the writer that removed one (another may have since the read) logs and returns it.
        removed = self._change(by, "removed", *(part for o in gone for part in (o.field, o.describe())))
        return [override for override, there in zip(gone, removed, strict=True) if there]

    def changes(self, count: int = 20) -> list[Change]:
        found = []
        for _entry_id, raw in self.client.xrevrange(self.log_key, "+", "-", count=count):
            fields = {_text(k): _text(v) for k, v in raw.items()}
            until = fields.get("until")
            by, what, override = (fields.get(name, "") for name in ("by", "what", "override"))
            found.append(Change(float(fields.get("time", 0)), by, what, override, float(until) if until else None))
        return found

    def _change(self, by: str, what: str, *fields: str) -> Any:
        args = (repr(self.clock()), os.urandom(8).hex(), self.log_size, by, what, LONGEST, *fields)
        return self.client.eval(lua_text("overrides.lua"), 2, self.key, self.log_key, *args)


def check_end(until: float, now: float) -> None:
    """:raises ValueError: unless an override's end, set at ``now``, is in the future and at most :data:`LONGEST`
    ahead: further is a slip (a year typed twice), and must fit an expiry Redis holds."""
    if not until > now:  # NaN too
        raise ValueError(f"the end, {_moment(until)}, is not in the future (now is {_moment(now)})")
    if until - now > LONGEST:
        raise ValueError(
            f"the end, {_moment(until)}, is more than {LONGEST_YEARS} years ahead (now is {_moment(now)}):"
            " an override lasts at most that long"
        )


def _moment(seconds: float) -> str:
    """A time as ``2027-12-31 00:00:00 UTC`` when a calendar holds it."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return f"{seconds!r} seconds since the epoch"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass
class OverrideFollower:
    """This process's copy of the overrides, read at most once per :data:`REFRESH_INTERVAL`. ``failed`` is told
    of a failed read and whether the one before failed too; the last copy stays, as when ``ready`` says no."""

    load: Callable[[], tuple[bytes | None, Sequence[Override]]]
    version: Callable[[], bytes | None]
    clock: Callable[[], float] = time.time
    failed: Callable[[Exception, bool], None] = lambda error, again: None
    ready: Callable[[], bool] = lambda: True
    monotonic: Callable[[], float] = time.monotonic
    table: OverrideTable = field(default_factory=OverrideTable)
    _seen: bytes | None = None
    _loaded: bool = False
    _failing: bool = False
    _due: float = float("-inf")

    def current(self) -> OverrideTable:
        """The table, read again first if it is over a second old (an ``HGET``, and ``HGETALL`` after a change)."""
        if self.monotonic() >= self._due:
            self.refresh()
        table = self.table
        if table.overrides and table.ends <= self.clock():
            self.table = table = OverrideTable(table.overrides, self.clock())
        return table

    def refresh(self, force: bool = False) -> None:
        # Due again before asking: other threads go on with the copy in hand. No lock: one a fork
        # left held would stop the child from ever asking.
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
