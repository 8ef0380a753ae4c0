"""The ``memory://`` client: the redis-py methods the package calls, on a keyspace of its own."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from ...checks import is_integer
from . import lua
from .keyspace import Keyspace, command
from .lua import lua_host
from .values import OK, CommandError, parse_integer, response_error


def encode(value: Any) -> bytes:
    """A command argument, encoded as redis-py encodes it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if type(value) is float:
        return repr(value).encode()
    if is_integer(value):
        return b"%d" % value
    raise redis.DataError(
        f"Invalid input of type: '{type(value).__name__}'. Convert to a bytes, string, int or float first."
    )


def _command(*name: str, convert: Callable[[Any], Any] = lambda reply: reply) -> Callable[..., Any]:
    """A method sending ``name`` and its arguments; its options (such as
    ``flushall(asynchronous=True)``) change nothing here."""

    def method(self: EmbeddedRedis, *args: Any, **options: Any) -> Any:
        return convert(self.execute_command(*name, *args))

    return method


def _words(**options: Any) -> list[Any]:
    """redis-py's keyword options as words: a flag set as its name, a value after its name."""
    words: list[Any] = []
    for name, value in options.items():
        if value is not None and value is not False:
            words += [name.upper()] if value is True else [name.upper(), value]
    return words


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


class EmbeddedRedis:
    """The ``memory://`` client, replying as a :class:`redis.Redis` with
    ``decode_responses=False``; ``lua`` is one of :data:`LUAS`."""

    def __init__(self, clock: Callable[[], float] = time.time, lua: str | None = None) -> None:
        self.keyspace = Keyspace(clock)
        #: The lupa module its scripts run on.
        self.lua = lua_host(lua).name
        #: The scripts this store knows (``SCRIPT LOAD``, ``EVAL``), by SHA1.
        self.scripts: set[str] = set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} memory://: {len(self.keyspace.data)} keys>"

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """One command's reply before redis-py's per-command conversions."""
        return self._locked(self._dispatch, [encode(arg) for arg in args])

    def _locked(self, call: Callable[..., Any], *args: Any) -> Any:
        with lua.LOCK:
            self.keyspace.tick()
            try:
                return call(*args)
            except CommandError as error:
                raise response_error(str(error)) from None

    def _dispatch(self, words: list[bytes]) -> Any:
        if words[0].upper() in _SCRIPTING:
            return command(_SCRIPTING, words)(self, words)
        return self.keyspace.execute(words)

    def _load(self, text: bytes) -> str:
        sha = hashlib.sha1(text).hexdigest()
        lua_host(self.lua).compile(sha, text)
        self.scripts.add(sha)
        return sha

    def _eval(self, words: list[bytes]) -> Any:
        sha = self._load(words[1]) if words[0].upper() == b"EVAL" else words[1].decode("utf-8", "replace").lower()
        count = parse_integer(words[2])
        if count < 0:
            raise CommandError("ERR Number of keys can't be negative")
        if count > len(words) - 3:
            raise CommandError("ERR Number of keys can't be greater than number of args")
        return self._run(sha, count, words[3:])

    def _run(self, sha: str, count: int, words: list[bytes]) -> Any:
        if sha not in self.scripts:
            raise CommandError("NOSCRIPT No matching script. Please use EVAL.")
        return lua_host(self.lua).run(self.keyspace, sha, count, words)

    def _script(self, words: list[bytes]) -> Any:
        subcommand = words[1].upper()
        if subcommand == b"LOAD" and len(words) == 3:
            return self._load(words[2]).encode()
        if subcommand == b"FLUSH":
            self.scripts.clear()
            return OK
        if subcommand == b"EXISTS" and len(words) > 2:
            return [int(word.decode("utf-8", "replace").lower() in self.scripts) for word in words[2:]]
        raise CommandError("ERR unknown subcommand or wrong number of arguments for 'script' command")

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        """The one call of every request: it skips the generic command path when it can."""
        if type(sha) is not str or type(numkeys) is not int or not 0 <= numkeys <= len(keys_and_args):
            return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)
        # Keys are strings and most arguments integers: encoded inline.
        words = [
            word.encode() if type(word) is str else b"%d" % word if type(word) is int else encode(word)
            for word in keys_and_args
        ]
        return self._locked(self._run, sha, numkeys, words)

    # The commands whose reply redis-py only converts (a status to True).
    eval = _command("EVAL")
    script_load = _command("SCRIPT", "LOAD", convert=bytes.decode)
    script_flush = _command("SCRIPT", "FLUSH", convert=bool)
    get = _command("GET")
    delete = _command("DEL", convert=int)
    exists = _command("EXISTS", convert=int)
    pexpire = _command("PEXPIRE", convert=bool)
    persist = _command("PERSIST", convert=bool)
    pttl = _command("PTTL", convert=int)
    dbsize = _command("DBSIZE", convert=int)
    dump = _command("DUMP")
    xlen = _command("XLEN", convert=int)
    flushall = _command("FLUSHALL", convert=bool)
    flushdb = _command("FLUSHDB", convert=bool)
    ping = _command("PING", convert=bool)
    hgetall = _command("HGETALL", convert=_pairs)

    def set(self, name: Any, value: Any, **options: Any) -> Any:
        """redis-py's ``set``, its options (``ex``, ``px``, ``nx``, ``xx``, ``keepttl``, ``get``) by keyword."""
        reply = self.execute_command("SET", name, value, *_words(**options))
        return reply if options.get("get") else (reply == b"OK" or None)

    def mset(self, mapping: dict[Any, Any]) -> bool:
        self.execute_command("MSET", *(word for pair in mapping.items() for word in pair))
        return True

    def keys(self, pattern: Any = "*") -> list[bytes]:
        return list(self.execute_command("KEYS", pattern))

    def scan(self, cursor: int = 0, match: Any = None, count: int | None = None) -> tuple[int, list[bytes]]:
        following, found = self.execute_command("SCAN", cursor, *_words(match=match, count=count))
        return int(following), found

    def scan_iter(self, match: Any = None, count: int | None = None) -> Iterator[bytes]:
        cursor = None
        while cursor != 0:
            cursor, found = self.scan(cursor or 0, match, count)
            yield from found

    def xadd(
        self,
        name: Any,
        fields: dict[Any, Any],
        id: Any = "*",
        maxlen: int | None = None,
        approximate: bool = True,
        nomkstream: bool = False,
    ) -> bytes | None:
        words: list[Any] = ["XADD", name, *_words(nomkstream=nomkstream)]
        if maxlen is not None:
            words += ["MAXLEN", "~" if approximate else "=", maxlen]
        words += [id, *(word for pair in fields.items() for word in pair)]
        reply: bytes | None = self.execute_command(*words)
        return reply

    def xrange(self, name: Any, min: Any = "-", max: Any = "+", count: int | None = None) -> list[Any]:
        return self._entries("XRANGE", name, min, max, count)

    def xrevrange(self, name: Any, max: Any = "+", min: Any = "-", count: int | None = None) -> list[Any]:
        return self._entries("XREVRANGE", name, max, min, count)

    def _entries(self, command: str, name: Any, first: Any, last: Any, count: int | None) -> list[Any]:
        raw = self.execute_command(command, name, first, last, *_words(count=count))
        return [(entry_id, _pairs(flat)) for entry_id, flat in raw]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> EmbeddedPipeline:
        """A pipeline without MULTI: each command atomic, the whole not."""
        return EmbeddedPipeline(self)

    def close(self) -> None:
        pass


#: The scripting commands, which the client runs, and their arity (see :data:`.keyspace.ARITIES`).
_SCRIPTING = {
    b"EVAL": (EmbeddedRedis._eval, -3),
    b"EVALSHA": (EmbeddedRedis._eval, -3),
    b"SCRIPT": (EmbeddedRedis._script, -2),
}


class EmbeddedPipeline:
    def __init__(self, client: EmbeddedRedis) -> None:
        self.client = client
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> EmbeddedPipeline:
        self.commands.append(args)
        return self

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        results: list[Any] = []
        for args in self.commands:
            try:
                results.append(self.client.execute_command(*args))
            except redis.RedisError as error:
                results.append(error)
        self.commands.clear()
        failed = next((result for result in results if isinstance(result, Exception)), None)
        if raise_on_error and failed is not None:
            raise failed
        return results
