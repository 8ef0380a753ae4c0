"""The one place that writes and reads the scripts' wire format, the keys, the time, the cost
and the *plan* (see :ref:`lua-convention`), and splits a cluster call by hash tag and merges its replies."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..errors import InvalidLimit
from ..storages.calls import Arg, Args, Call
from .rates import MAX_LAYERS, Layer

__all__ = [
    "LAYOUT_CACHE_SIZE",
    "MAX_PLAN_DELAY",
    "Fanout",
    "Layout",
    "Part",
    "Reply",
    "entries",
    "entry",
    "hash_tag",
    "merge",
    "penalized",
    "settle",
    "shaped",
    "split",
]

#: How many request shapes' layouts a throttle keeps.
LAYOUT_CACHE_SIZE = 256

SLOTS_CODE = b"cc"

#: A plan entry's layer, penalty and shaping (wait in ms, burst): little-endian unsigned 32-bit integers.
_LAYER, _PENALTY, _SHAPING = struct.Struct("<II"), struct.Struct("<III"), struct.Struct("<II")
_PENALIZED, _DELAYED = 1, 2

#: The longest delay a plan entry can carry, in seconds (4 bytes of milliseconds).
MAX_PLAN_DELAY = (2**32 - 1) / 1000


def entry(
    code: str,
    layers: Sequence[Layer],
    penalty: tuple[int, int, int] | None = None,
    shaping: tuple[int, int] | None = None,
) -> bytes:
    """The plan entry of one identity under one limit (see :ref:`lua-convention`).

    :raises InvalidLimit: for more than :data:`~flask_redis_throttle.core.engine.rates.MAX_LAYERS` layers.
    """
    if len(layers) > MAX_LAYERS:
        raise InvalidLimit(f"a limit has at most {MAX_LAYERS} layers, not {len(layers)}", spec=layers)
    data = code.encode("ascii") + bytes([len(layers)])
    data += b"".join(_LAYER.pack(layer.quota, layer.window) for layer in layers)
    data += bytes([(0 if penalty is None else _PENALIZED) | (0 if shaping is None else _DELAYED)])
    if penalty is not None:
        data += _PENALTY.pack(*penalty)
    if shaping is not None:
        data += _SHAPING.pack(*shaping)
    return data


def entries(plan: bytes) -> Iterator[tuple[bytes, int, bool]]:
    """Each entry of ``plan``, with its number of layers and whether it has a penalty."""
    at = 0
    while at < len(plan):
        count = plan[at + 2]
        flag = at + 3 + _LAYER.size * count
        penalty = bool(plan[flag] & _PENALIZED)
        end = flag + 1 + (_PENALTY.size if penalty else 0) + (_SHAPING.size if plan[flag] & _DELAYED else 0)
        yield plan[at:end], count, penalty
        at = end


def penalized(plan: bytes) -> bool:
    """Whether some entry of ``plan`` has a penalty."""
    return any(penalty for _, _, penalty in entries(plan))


def shaped(plan: bytes) -> bool:
    """Whether some entry of ``plan`` has a delay."""
    return any(text[3 + _LAYER.size * count] & _DELAYED for text, count, _ in entries(plan))


@dataclass(frozen=True, slots=True)
class Layout:
    """A script call apart from who it counts, made once per request shape (its limits, and how
    many identities each has). For each layer, ``places`` holds the number of its limit, of its
    identity and of the layer among the limit's; ``windows``, its key's number, window and quota.
    ``held`` are the keys holding concurrency slots and ``held_plan`` the plan giving them back;
    ``lease`` is the slots' longest lease, in seconds."""

    plan: bytes
    penalized: bool
    places: tuple[tuple[int, int, int], ...]
    windows: tuple[tuple[int, int, int], ...]
    shaped: bool = False
    held: tuple[int, ...] = ()
    held_plan: bytes = b""
    slot_layers: frozenset[int] = frozenset()
    lease: int = 0

    @classmethod
    def of(cls, limits: Iterable[tuple[bytes, int, Sequence[Layer]]]) -> Layout:
        """The layout of ``limits``: each its entry, how many identities it counts, and its layers."""
        texts: list[bytes] = []
        places: list[tuple[int, int, int]] = []
        windows: list[tuple[int, int, int]] = []
        held: list[int] = []
        slot_layers: list[int] = []
        lease = 0
        for number, (text, identities, layers) in enumerate(limits):
            for who in range(identities):
                if text.startswith(SLOTS_CODE):
                    held.append(len(texts))
                    slot_layers += range(len(places), len(places) + len(layers))
                    lease = max(lease, *(layer.window for layer in layers))
                places += [(number, who, n) for n in range(len(layers))]
                windows += [(len(texts), layer.window, layer.quota) for layer in layers]
                texts.append(text)
        plan = b"".join(texts)
        held_plan = b"".join(texts[key] for key in held)
        return cls(
            plan,
            penalized(plan),
            tuple(places),
            tuple(windows),
            shaped(plan),
            tuple(held),
            held_plan,
            frozenset(slot_layers),
            lease,
        )

    def layers(self, keys: Sequence[str]) -> list[tuple[str, int]]:
        """Each layer as the block cache knows it: ``<key>=<window>``, and its quota."""
        return [(f"{keys[key]}={window}", quota) for key, window, quota in self.windows]


class Reply(NamedTuple):
    """A script's verdict on one request, decoded from its flat reply.

    :param admitted: whether every layer had room (and the hit was recorded).
    :param layer: the deciding layer, 0-based, in the plan's order (``remaining``, ``reset`` and
        ``retry_after`` are as :class:`~flask_redis_throttle.core.engine.throttle.Decision`'s).
    :param now: the time the script decided at, in microseconds, which a refund is sent with.
    :param penalized: whether the deciding layer refused because its identity serves a penalty.
    """

    admitted: bool
    layer: int
    remaining: int
    reset: float
    retry_after: float
    now: int
    penalized: bool = False

    @classmethod
    def decode(cls, raw: Sequence[int]) -> Reply:
        """The :class:`Reply` of the script's six integers, or seven when some entry has a penalty."""
        admitted, index, remaining, reset_us, retry_us, now = raw[:6]
        penalized = len(raw) > 6 and raw[6] == 1
        fields = (admitted == 1, index - 1, remaining, reset_us / 1e6, retry_us / 1e6, int(now), penalized)
        return tuple.__new__(cls, fields)  # as _make does: the generated __new__ is one more call

    @staticmethod
    def refused(index: int, remaining: int, reset: int, retry: int, penalized: bool) -> list[int]:
        """The raw reply of a refusal by layer ``index`` (0-based, times in microseconds) that the
        block cache answers in the script's place."""
        return [0, index + 1, remaining, reset, retry, 0, int(penalized)]


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes: the first ``{...}``, if not empty."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


@dataclass(frozen=True, slots=True)
class Part:
    """One call of a request split by hash tag (see :func:`split`).

    :param keys: its entries' keys, then their penalty keys.
    :param args: now, cost and its entries' plan, then any that follow.
    :param layers: each of its layers' number in the whole request's plan (0-based).
    :param windows: its layers' windows, in microseconds, each once (see :func:`merge`).
    :param tag: the hash tag its keys share.
    """

    keys: list[str]
    args: list[Arg]
    layers: list[int]
    windows: tuple[int, ...] = ()
    tag: str = ""


def split(keys: Sequence[str], args: Args) -> list[Part]:
    """Cut one call into one per hash tag, each with that tag's entries and penalty keys, in their
    order, and the arguments after the plan as they are."""
    now, cost, plan, rest = args[0], args[1], args[2], list(args[3:])
    assert isinstance(plan, bytes)
    parts = list(entries(plan))
    penalty_keys = iter(keys[len(parts) :])
    groups: dict[str, tuple[list[str], list[str], list[bytes], list[int], set[int]]] = {}
    layer = 0
    for key, (text, count, penalty) in zip(keys, parts, strict=False):
        own_keys, penalties, texts, layers, windows = groups.setdefault(hash_tag(key), ([], [], [], [], set()))
        own_keys.append(key)
        texts.append(text)
        layers.extend(range(layer, layer + count))
        windows.update(window * 1_000_000 for _, window in _LAYER.iter_unpack(text[3 : 3 + _LAYER.size * count]))
        layer += count
        if penalty:
            penalties.append(next(penalty_keys))
    return [
        Part(own_keys + penalties, [now, cost, b"".join(texts), *rest], layers, tuple(sorted(windows)), tag)
        for tag, (own_keys, penalties, texts, layers, windows) in groups.items()
    ]


@dataclass(frozen=True, slots=True)
class Fanout:
    """A cluster request's ``parts`` and their ``calls``, worked out once and kept by the sender
    (not their nodes: the storage keeps those), with the ``scripts`` they take, by strategies."""

    parts: list[Part]
    calls: list[Call]
    scripts: dict[frozenset[str], Any] = field(default_factory=dict)

    @classmethod
    def of(cls, parts: list[Part]) -> Fanout:
        return cls(parts, [(part.keys, part.args) for part in parts])

    def sent_with(self, rest: Sequence[Arg]) -> Fanout:
        """With ``rest``, the arguments that change per request, after each part's plan."""
        if not rest:
            return self
        parts = [replace(part, args=[*part.args, *rest]) for part in self.parts]
        return Fanout(parts, [(part.keys, part.args) for part in parts], self.scripts)

    def given_back_at(self, times: Times) -> list[Call]:
        """The calls of a refund (whose arguments hold a wait), each part's
        at the time and wait its node replied when it admitted the request
        (see :class:`SplitReply`): the window it was counted in."""
        known = {tag: (now, wait) for tag, now, wait in times}
        calls: list[Call] = []
        for part in self.parts:
            now, wait = known.get(part.tag, (part.args[0], part.args[3]))
            calls.append((part.keys, [now, part.args[1], part.args[2], wait, *part.args[4:]]))
        return calls


#: Each part of a split request by its hash tag: the time it was decided at
#: on its node, and the wait it replied, in microseconds.
Times = tuple[tuple[str, int, int], ...]


class SplitReply(list[int]):
    """The merged reply of a request admitted on several nodes, with each
    part's :data:`Times`: a later refund of it (a block of quota given back,
    its concurrency slots) is sent to each node at the time that node
    counted it, as the nodes' clocks may put it in different windows. The
    times are worked out when asked for: only a request that holds
    something needs them."""

    __slots__ = ("_parts", "_replies")

    def __init__(self, reply: list[int], parts: Sequence[Part], replies: Sequence[Sequence[int]]) -> None:
        super().__init__(reply)
        self._parts, self._replies = parts, replies

    @property
    def times(self) -> Times:
        return tuple((part.tag, got[5], got[4]) for part, got in zip(self._parts, self._replies, strict=True))


def times_of(raw: Sequence[int]) -> Times:
    """A script reply's :data:`Times`: none but a :class:`SplitReply`'s."""
    return raw.times if type(raw) is SplitReply else ()


def settle(parts: Sequence[Part], replies: Sequence[Sequence[int]]) -> tuple[list[int], list[Call]]:
    """The reply one call over every part's keys would have given, and the calls that refund the
    parts that admitted when another refused: a request is admitted whole or not at all. A refund
    (a negative cost), or a request that cost nothing, is never refunded."""
    cost = parts[0].args[1]
    if isinstance(cost, int) and cost < 0:
        return list(replies[0]), []
    reply = merge(parts, replies)
    refunds: list[Call] = []
    if reply[0] == 1:
        return SplitReply(reply, parts, replies), []
    if reply[0] == 0 and isinstance(cost, int) and cost > 0:
        # At the time each part decided, with its wait (a sliding log's entries are stamped with it).
        admitted = [(part, got) for part, got in zip(parts, replies, strict=True) if got[0] == 1]
        refunds = [(part.keys, [got[5], -cost, part.args[2], got[4], *part.args[4:]]) for part, got in admitted]
    return reply, refunds


def merge(parts: Sequence[Part], replies: Sequence[Sequence[int]]) -> list[int]:
    """The reply one call over every part's keys would have given, its deciding layer chosen as
    the script does. An admission's time is the part's whose first window ends soonest: a leased
    block must be spent before any window it was counted in ends (see :doc:`/leases`)."""
    # Plain loops: all() and any() over generators took half as long again.
    admitted, flagged = True, False
    for reply in replies:
        if reply[0] != 1:
            admitted = False
        if len(reply) > 6:
            flagged = True
    best: Sequence[int] | None = None
    rank: tuple[int, ...] = ()
    layer = 0
    for part, reply in zip(parts, replies, strict=True):
        index = part.layers[reply[1] - 1]
        this: tuple[int, ...]
        if admitted:
            this = (reply[2], -reply[3], index)
        elif reply[0] == 0:
            this = (-reply[4], index)
        else:
            continue
        if best is None or this < rank:
            best, rank, layer = reply, this, index
    if best is None:
        raise ValueError("no part of the request was decided")
    merged = [best[0], layer + 1, *best[2:6]]
    if admitted:
        merged[4] = max(reply[4] for reply in replies)
        merged[5] = _soonest_ending(parts, replies)
    if flagged:
        merged.append(best[6] if len(best) > 6 else 0)
    return merged


def _soonest_ending(parts: Sequence[Part], replies: Sequence[Sequence[int]]) -> int:
    """The time of the reply whose part's first window ends soonest after it."""
    at, soonest = replies[0][5], -1
    for part, reply in zip(parts, replies, strict=True):
        now = reply[5]
        for window in part.windows:
            left = window - now % window
            if soonest < 0 or left < soonest:
                at, soonest = now, left
    return at
