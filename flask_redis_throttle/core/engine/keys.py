"""Who a counter belongs to, its Redis key ``rl:{ip:Yq3...}:api:fw`` (see
:ref:`keys`) and the ``SCAN`` patterns that find it; what logs do with a
value from a request. It imports neither Flask nor Redis."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Identity:
    """One of the identities a request is known by.

    :param kind: ``"ip"``, ``"user"``, or ``"key:<function>"`` for a custom key function.
    :param value: the IP address (or IPv6 network), user id or custom key.
    """

    kind: str
    value: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"

    @classmethod
    def written(cls, text: str) -> Identity:
        """The identity ``str()`` wrote as ``text`` (a key function's kind is ``key:<name>``)."""
        kind, _colon, value = text.partition(":")
        if kind == "key":
            name, _colon, value = value.partition(":")
            kind = f"key:{name}"
        return cls(kind, value)


#: Values longer than this are hashed every time, not cached: a hostile client's would fill the cache.
CACHED_VALUE_LENGTH = 256


def _tag(kind: str, value: str, secret: bytes) -> str:
    raw = f"{kind}\0{value}".encode("utf-8", "surrogatepass")
    digest = base64.urlsafe_b64encode(hashlib.blake2b(raw, digest_size=16, key=_digest_key(secret)).digest())
    label = kind if kind in ("ip", "user") else "key"
    return f"{label}:{digest.rstrip(b'=').decode('ascii')}"


_cached_tag = lru_cache(maxsize=8192)(_tag)


def identity_tag(kind: str, value: str, secret: bytes = b"") -> str:
    """The hash tag, without braces, of this identity's keys: ``ip:``, ``user:`` or ``key:`` and a
    digest of the kind and ``value`` (keyed by ``secret``): two key functions' same string count apart."""
    if len(value) <= CACHED_VALUE_LENGTH:
        return _cached_tag(kind, value, secret)
    return _tag(kind, value, secret)


def counter_key(head: str, kind: str, value: str, secret: bytes, suffix: str) -> str:
    """``head`` (the prefix and ``{``), the identity's tag, then ``suffix``."""
    return head + identity_tag(kind, value, secret) + suffix


#: :func:`counter_key`, kept: a returning client's keys are one lookup each.
cached_counter_key = lru_cache(maxsize=8192)(counter_key)


def kept_counter_key(head: str, kind: str, value: str, secret: bytes, suffix: str) -> str:
    """:func:`counter_key`, kept for a value short enough."""
    make = cached_counter_key if len(value) <= CACHED_VALUE_LENGTH else counter_key
    return make(head, kind, value, secret, suffix)


@lru_cache(maxsize=16)
def _digest_key(secret: bytes) -> bytes:
    """BLAKE2b keys are at most 64 bytes: any secret is hashed to 32."""
    return hashlib.blake2b(secret, digest_size=32).digest() if secret else b""


_UNSAFE = re.compile(r"[^A-Za-z0-9._/@+-]")


def escape_scope(scope: str) -> str:
    """``scope`` as a key part no other scope shares: all but letters, digits and ``._/@+-`` become ``%XX``."""
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode("utf-8", "surrogatepass")), scope)


#: Values from a request are cut to this length wherever they are written
#: down (the refusal log, log lines), so that a client cannot bloat either.
MAX_VALUE_LENGTH = 200


def cut(value: str) -> str:
    """``value``, or its start and an ellipsis, in at most :data:`MAX_VALUE_LENGTH` characters."""
    return value if len(value) <= MAX_VALUE_LENGTH else value[: MAX_VALUE_LENGTH - 1] + "…"


def loggable(value: str) -> str:
    """``value`` in one log line, unable to forge lines: unprintable characters as Python
    writes them in a literal (``\\n``), and :func:`cut` (only its start is read)."""
    head = value[:MAX_VALUE_LENGTH]
    if not head.isprintable():
        head = "".join(char if char.isprintable() else repr(char)[1:-1] for char in head)
    return cut(head + "…" if len(value) > MAX_VALUE_LENGTH else head)


#: How many keys one ``DEL`` deletes at most, and the ``COUNT`` hint of ``SCAN``.
BATCH = 500

_GLOB = re.compile(r"([\\*?\[\]])")


class _Deleting(Protocol):
    def scan_iter(self, match: str, count: int) -> Iterable[Any]: ...

    def delete(self, *names: Any) -> Any: ...


#: The glob of every identity's tag: other keys under the prefix, such as
#: the overrides' log ``<prefix>{overrides}:log``, are left alone.
_ANY_TAG = "[iuk]*:" + "?" * 22


def glob_escape(text: str) -> str:
    """``text`` with Redis glob's special characters (``*?[]\\``) escaped."""
    return _GLOB.sub(r"\\\1", text)


def counter_pattern(prefix: str, tag: str | None, scope: str | None = None, beneath: bool = False) -> str:
    """The ``SCAN`` pattern of an identity's counters, or every identity's, in one scope or all.

    :param prefix: the key prefix (``RATELIMIT_KEY_PREFIX``).
    :param tag: the identity's hash tag (:func:`~flask_redis_throttle.core.engine.keys.identity_tag`); None for all.
    :param scope: only this scope's counters, or None for every scope.
    :param beneath: instead of ``scope``'s, those of every scope named ``scope:...`` (a
        dynamic limit of the Flask-Limiter shim counts each of its strings in one).
    """
    tail = ""
    if scope is not None:
        tail = escape_scope(scope + ":") if beneath else escape_scope(scope) + ":"
    if tag is None:
        return glob_escape(f"{prefix}{{") + _ANY_TAG + glob_escape(f"}}:{tail}") + "*"
    return glob_escape(f"{prefix}{{{tag}}}:{tail}") + "*"


def delete_counters(client: _Deleting, pattern: str) -> int:
    """Delete every key that matches ``pattern``, in batches, and return how many were deleted
    (not those deleted by someone else meanwhile). A key ``SCAN`` returns twice (Valkey does
    while its table rehashes) is sent to ``DEL`` once.

    :raises redis.RedisError: if Redis cannot answer; batches already sent stay deleted.
    """
    deleted = 0
    seen: set[Any] = set()
    batch: list[Any] = []
    for key in client.scan_iter(match=pattern, count=BATCH):
        if key in seen:
            continue
        seen.add(key)
        batch.append(key)
        if len(batch) == BATCH:
            deleted += int(client.delete(*batch))
            batch = []
    if batch:
        deleted += int(client.delete(*batch))
    return deleted
