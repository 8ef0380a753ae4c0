"""The refusal log in capped Redis streams (:doc:`/refusals`). This module imports Redis but not Flask."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import RedisClusterException, RedisError

from ..engine.keys import MAX_VALUE_LENGTH as MAX_VALUE_LENGTH
from ..engine.keys import cut

#: A time as seconds since the epoch, or an aware or naive (local) datetime.
Moment = float | datetime


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused request; its fields are told in :doc:`/refusals`."""

    id: str
    time: float
    endpoint: str
    scope: str
    layer: str
    strategy: str
    identity: str
    identities: tuple[str, ...]
    retry_after: float
    shadow: bool = False
    penalized: bool = False
    cut: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, ``identities`` as a list, ready for JSON."""
        return dataclasses.asdict(self) | {"identities": list(self.identities)}

    @property
    def others(self) -> tuple[str, ...]:
        """The identities on the request that did not refuse it, such as the IP of a user over its limit."""
        return tuple(identity for identity in self.identities if identity != self.identity)


@dataclass(frozen=True, slots=True)
class Attribution:
    """One identity's refusals in a time range, and who else was present on them.

    :param identity: the identity whose counter refused the requests.
    :param refusals: how many of them it refused.
    :param others: the other identities on those requests (not refused by them), with how many, most first.
    :param cut: True if ``identity`` is what the log kept of a longer one.
    """

    identity: str
    refusals: int
    others: tuple[tuple[str, int], ...]
    cut: bool = False


#: What UTF-8 cannot encode: the identity field keeps it as escapes.
_SURROGATES = re.compile("[\ud800-\udfff]")

#: The fields of an entry that are "1" when a refusal is so, else missing.
_FLAGS = ("shadow", "penalized", "cut")

#: How many streams the log is split into on a Redis Cluster: one at least on every master of up to 16.
CLUSTER_SHARDS = 16


class RefusalLog:
    """A log of the newest ``size`` refusals, in one stream or in ``shards`` (:data:`CLUSTER_SHARDS` on a
    cluster), each trimmed to about ``size``: see :doc:`/refusals`."""

    def __init__(self, client: Any, key: str, size: int = 1000, shards: int = 1) -> None:
        if size < 1:
            raise ValueError(f"a refusal log keeps at least one entry, not {size}")
        if not 1 <= shards <= REDIS_CLUSTER_HASH_SLOTS:
            raise ValueError(f"a refusal log has 1 to {REDIS_CLUSTER_HASH_SLOTS} shards, not {shards}")
        if shards > 1 and ("{" in key or "}" in key):
            raise ValueError(f"the key {key!r} of a sharded refusal log must not contain braces: they pick its slot")
        self.client = client
        self.key = key
        self.size = size
        self.keys: tuple[str, ...] = (key,) if shards == 1 else tuple(_shard_key(key, i, shards) for i in range(shards))

    def shard(self, near: str) -> str:
        """The stream for a refusal by the identity whose hash tag is ``near``: one on the node of its counters,
        else the one whose slots are nearest. The slot map is read, not copied, to follow a failover."""
        keys, count = self.keys, len(self.keys)
        if count == 1:
            return keys[0]
        home = key_slot(near.encode("utf-8", "backslashreplace")) * count // REDIS_CLUSTER_HASH_SLOTS
        node = self._node(near)
        if node is not None:
            for distance in range(count // 2 + 1):
                for i in ((home - distance) % count, (home + distance) % count):
                    if self._node(keys[i]) == node:
                        return keys[i]
        return keys[home]

    def _node(self, key: str) -> str | None:
        try:
            node = self.client.get_node_from_key(key)
        except (AttributeError, RedisError, RedisClusterException):
            return None
        name: str | None = getattr(node, "name", None)
        return name

    def record(
        self,
        *,
        endpoint: str,
        scope: str,
        layer: str,
        strategy: str,
        identity: str,
        identities: Iterable[str],
        retry_after: float,
        shadow: bool = False,
        penalized: bool = False,
        stream: str | None = None,
    ) -> None:
        """Append one refusal with one ``XADD``, to ``stream`` (by default ``shard(identity)``).

        :raises ValueError: if ``stream`` is not one of :attr:`keys`.
        """
        if stream is None:
            stream = self.shard(identity)
        elif stream not in self.keys:
            raise ValueError(f"stream {stream!r} is not one of this refusal log's {len(self.keys)} streams")
        kept = cut(identity)
        fields = dict(endpoint=endpoint, scope=cut(scope), layer=layer, strategy=strategy, identity=kept)
        fields.update(identities=json.dumps([cut(i) for i in identities]), retry_after=f"{retry_after:.6f}")
        fields.update((flag, "1") for flag, on in zip(_FLAGS, (shadow, penalized, kept != identity), strict=True) if on)
        if _SURROGATES.search(kept):  # the identity field keeps them as escapes; this one, exactly
            fields["exact"] = json.dumps(kept)
        sharded = len(self.keys) > 1
        if sharded:  # orders two streams' entries of one millisecond
            fields["at"] = str(time.time_ns() // 1000)
        # backslashreplace keeps what UTF-8 cannot encode (lone surrogates) readable.
        encoded = {name: value.encode("utf-8", "backslashreplace") for name, value in fields.items()}
        self.client.xadd(stream, encoded, maxlen=self.size, approximate=sharded)

    def recent(self, count: int = 20, since: Moment | None = None) -> list[Refusal]:
        """At most ``count`` latest refusals at or after ``since``, newest first."""
        return [_decode(entry_id, fields) for entry_id, fields in self._newest(count, since)]

    def between(self, since: Moment | None = None, until: Moment | None = None) -> list[Refusal]:
        """Every refusal kept in a time range, oldest first."""
        # An entry is kept if fewer than `size` came after it, whenever they came: read from the newest.
        entries = self._newest(self.size, since)
        if until is not None:
            last = int(_bound(until, "+"))
            entries = [entry for entry in entries if _order(entry, 0)[0] <= last]
        return [_decode(entry_id, fields) for entry_id, fields in reversed(entries)]

    def top(self, count: int = 10, since: Moment | None = None, until: Moment | None = None) -> list[tuple[str, int]]:
        """The most refused identities in a time range, with their counts, most refused first: only the identity
        whose counter refused counts (not the IP of a user over its limit). Ties keep the order first seen."""
        return [(found.identity, found.refusals) for found in self.attributed(count, since, until)]

    def attributed(
        self, count: int = 10, since: Moment | None = None, until: Moment | None = None
    ) -> list[Attribution]:
        """:meth:`top`, with the other identities present on each one's refusals."""
        tally: Counter[tuple[str, bool]] = Counter()
        others: dict[tuple[str, bool], Counter[str]] = {}
        for refusal in self.between(since, until):
            refused = (refusal.identity, refusal.cut)
            tally[refused] += 1
            others.setdefault(refused, Counter()).update(refusal.others)
        return [
            Attribution(refused[0], refusals, tuple(others[refused].most_common()), refused[1])
            for refused, refusals in tally.most_common(count)
        ]

    def per_minute(self, until: float, minutes: int = 60) -> list[int]:
        """How many refusals there were in each of the ``minutes`` minutes before ``until``, oldest first: minutes
        end at ``until``, not on the clock's, so a refusal just logged falls in the last."""
        start = until - 60 * minutes
        counts = [0] * minutes
        for refusal in self.between(start, until):
            # A stream ID is whole milliseconds; one at the very start counts in the first minute.
            counts[min(max(int((refusal.time - start) // 60), 0), minutes - 1)] += 1
        return counts

    def clear(self) -> None:
        """Delete the whole log."""
        for key in self.keys:
            self.client.delete(key)

    def _newest(self, count: int, since: Moment | None) -> list[tuple[Any, dict[Any, Any]]]:
        """The newest ``count`` entries at or after ``since`` among the newest :attr:`size`, newest first."""
        count = min(count, self.size)
        if count < 1:
            return []
        low = _bound(since, "-")
        if len(self.keys) == 1:
            newest: list[tuple[Any, dict[Any, Any]]] = self.client.xrevrange(self.keys[0], "+", low, count=count)
            return newest
        pipe = self.client.pipeline(transaction=False)
        for key in self.keys:
            pipe.xrevrange(key, "+", low, count=count)
        replies: list[list[tuple[Any, dict[Any, Any]]]] = pipe.execute()
        merged = [(_order(entry, shard), entry) for shard, entries in enumerate(replies) for entry in entries]
        return [entry for _, entry in sorted(merged, key=lambda item: item[0], reverse=True)[:count]]


def _bound(moment: Moment | None, open_end: str) -> str:
    if moment is None:
        return open_end
    seconds = moment.timestamp() if isinstance(moment, datetime) else float(moment)
    return str(max(int(seconds * 1000), 0))


def _shard_key(key: str, shard: int, shards: int) -> str:
    """The first ``<key>:<shard>.<n>`` whose slot is in the shard's equal part of the slots."""
    names = (f"{key}:{shard}.{n}" for n in itertools.count())
    return next(name for name in names if key_slot(name.encode()) * shards // REDIS_CLUSTER_HASH_SLOTS == shard)


def _order(entry: tuple[Any, dict[Any, Any]], shard: int) -> tuple[int, int, int, int]:
    """An entry's place in the merged log: ID milliseconds, the writer's microseconds, ID sequence, stream."""
    milliseconds, _, sequence = _text(entry[0]).partition("-")
    written = _text(entry[1].get(b"at", entry[1].get("at", b"0")))
    return (int(milliseconds), int(written) if written.isdigit() else 0, int(sequence or 0), shard)


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _decode(entry_id: Any, raw: dict[Any, Any]) -> Refusal:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    entry = _text(entry_id)
    endpoint, scope, layer, strategy = (fields.get(name, "") for name in ("endpoint", "scope", "layer", "strategy"))
    shadow, penalized, cut = (fields.get(flag) == "1" for flag in _FLAGS)
    identity = json.loads(fields["exact"]) if "exact" in fields else fields.get("identity", "")
    identities = tuple(json.loads(fields.get("identities", "[]")))
    retry_after = float(fields.get("retry_after", "0"))
    when = int(entry.split("-")[0]) / 1000
    return Refusal(
        entry, when, endpoint, scope, layer, strategy, identity, identities, retry_after, shadow, penalized, cut
    )
