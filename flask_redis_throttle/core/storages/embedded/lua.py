"""The Lua host: our scripts compiled once per process on lupa's Lua 5.1
(or LuaJIT), in a sandbox like Redis's, ``redis.call`` going to the keyspace."""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .keyspace import Keyspace
from .values import OK, CommandError, Status

#: Builds the sandbox of every script, where, as in Redis, reading a missing global or
#: creating one is an error; returns the functions that compile and run a script.
_SANDBOX = """
local py_call, py_pcall, OK = ...
-- OK comes from Python as a marker: a fresh {ok = 'OK'} is cheaper built here.
local function status(reply)
  if reply == OK then
    return {ok = 'OK'}
  end
  return reply
end
local redis = {
  call = function(...) return status(py_call(...)) end,
  pcall = function(...) return status(py_pcall(...)) end,
  error_reply = function(message) return {err = message} end,
  status_reply = function(message) return {ok = message} end,
}
-- Redis's struct library, as much as our scripts use: little-endian
-- unsigned integers of 1 to 8 bytes ('<I4I6I4'), exact up to 2^53.
local byte, char, floor = string.byte, string.char, math.floor
local formats = {}
local function sizes(format)
  local list = formats[format]
  if list == nil then
    list = {}
    for n in string.gmatch(string.sub(format, 2), 'I([1-8])') do
      list[#list + 1] = n + 0
    end
    if string.sub(format, 1, 1) ~= '<' or '<' .. string.rep('I_', #list) ~= string.gsub(format, '%d', '_') then
      error('struct: unsupported format ' .. format, 3)
    end
    formats[format] = list
  end
  return list
end
local struct = {
  pack = function(format, ...)
    local list, bytes, m = sizes(format), {}, 0
    for k = 1, #list do
      local value = floor(select(k, ...))
      for _ = 1, list[k] do
        local low = value % 256
        m = m + 1
        bytes[m] = low
        value = (value - low) / 256
      end
    end
    return char(unpack(bytes, 1, m))
  end,
  unpack = function(format, data, at)
    local list, out = sizes(format), {}
    at = at or 1
    for k = 1, #list do
      local last = at + list[k] - 1
      if last > #data then
        error('struct: data string too short', 2)
      end
      local value = 0
      for i = last, at, -1 do
        value = value * 256 + byte(data, i)
      end
      out[k], at = value, last + 1
    end
    out[#list + 1] = at
    return unpack(out, 1, #list + 1)
  end,
}
local env = {
  redis = redis, string = string, math = math, table = table, struct = struct,
  tonumber = tonumber, tostring = tostring, ipairs = ipairs, pairs = pairs,
  unpack = unpack, type = type, select = select, next = next, error = error,
  assert = assert, pcall = pcall, rawget = rawget, rawset = rawset,
  rawequal = rawequal, setmetatable = setmetatable, getmetatable = getmetatable,
  _VERSION = _VERSION,
}
setmetatable(env, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function(_, name)
    error("Script attempted to create global variable '" .. tostring(name) .. "'", 2)
  end,
})
local function compile(source)
  local chunk, message = loadstring(source, '@user_script')
  if not chunk then
    return nil, message
  end
  return setfenv(chunk, env)
end
-- An array of numbers and strings (our scripts' reply) is converted here as Redis does it,
-- and goes back as true, its length and its items (a tuple); anything else as it is.
local ceil = math.ceil
local function reply(result)
  if type(result) ~= 'table' or result.err ~= nil or result.ok ~= nil then
    return result
  end
  local items, n = {}, 0
  while true do
    local item = result[n + 1]
    local kind = type(item)
    if kind == 'number' then
      if item >= 0 then item = floor(item) else item = ceil(item) end
    elseif kind ~= 'string' then
      if item == nil then
        break
      end
      return result
    end
    n = n + 1
    items[n] = item
  end
  return true, n, unpack(items, 1, n)
end
local function run(chunk, keys, ...)
  local all, KEYS, ARGV = {...}, {}, {}
  for i = 1, keys do
    KEYS[i] = all[i]
  end
  for i = keys + 1, #all do
    ARGV[i - keys] = all[i]
  end
  return reply(chunk(KEYS, ARGV))
end
return compile, run
"""

#: Put before a script's text, on its first line: errors' line numbers stay the script's.
_HEAD = "local KEYS, ARGV = ...; "

#: Integers below this are numbers Lua holds exactly, and written in full.
_EXACT = 2**53


class LuaHost:
    """One Lua runtime for the process (a module of :data:`LUAS`), the scripts compiled on it by SHA1, and
    ``redis.call`` bound to whichever keyspace runs a script. Not locked: callers hold the store's lock."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lua = importlib.import_module(f"lupa.{name}")
        self.runtime = self.lua.LuaRuntime(
            encoding=None, register_eval=False, register_builtins=False, unpack_returned_tuples=False
        )
        self.table_from = self.runtime.table_from
        #: What a command's OK comes back to Lua as (see _SANDBOX).
        self.ok = self.runtime.table()
        self.compiler, self.runner = self.runtime.execute(_SANDBOX, self._call, self._pcall, self.ok)
        self.functions: dict[str, Any] = {}
        self.keyspace: Keyspace | None = None

    def compile(self, sha: str, text: bytes) -> Any:
        function = self.functions.get(sha)
        if function is None:
            function = self.compiler(_HEAD.encode() + text)
            if isinstance(function, tuple):  # nil and the message
                message = function[1].decode("utf-8", "replace")
                raise CommandError(f"ERR Error compiling script (new function): {message}")
            self.functions[sha] = function
            _SOURCES[sha] = text
        return function

    def run(self, keyspace: Keyspace, sha: str, keys: int, words: Sequence[bytes]) -> Any:
        """Run a script on ``keyspace``: its reply as Redis converts it, or a CommandError."""
        function = self.functions.get(sha)
        if function is None:  # known to the store, not yet to this runtime (see _HOSTS)
            function = self.compile(sha, _SOURCES[sha])
        self.keyspace = keyspace
        try:
            result = self.runner(function, keys, *words)
        except CommandError as error:
            raise CommandError(f"{error} script: {sha}") from None
        except self.lua.LuaError as error:
            message = str(error).split("\nstack traceback:", 1)[0]
            raise CommandError(f"ERR {message} script: {sha}") from None
        finally:
            self.keyspace = None
        lua_type = self.lua.lua_type
        if type(result) is tuple:  # an array of numbers and strings (see _SANDBOX)
            return [item if type(item) is not float else _from_lua(item, lua_type) for item in result[2:]]
        return _from_lua(result, lua_type)

    def _call(self, *words: Any) -> Any:
        """``redis.call``. The GET and the SET with PX of every counter skip the generic path when their arguments are
        those it would run anyway: main.lua writes the PX as ``%d`` does, digits without a leading zero."""
        keyspace = self.keyspace
        assert keyspace is not None
        count = len(words)
        if count == 2 and words[0] == b"GET" and type(words[1]) is bytes:
            value = keyspace.typed(words[1], bytes)
            return False if value is None else value
        if count == 5 and words[0] == b"SET" and words[3] == b"PX":
            key, value, amount = words[1], words[2], words[4]
            if type(amount) is bytes and amount.isdigit() and amount[:1] != b"0" and len(amount) < 16:
                amount = int(amount)
            if type(key) is bytes and type(value) is bytes and type(amount) is int and 0 < amount < _EXACT:
                keyspace.data[key] = value
                keyspace.expire_at(key, keyspace.now + amount)
                return self.ok
        if not words:
            raise CommandError("ERR Please specify at least one argument for this redis lib call")
        return self._to_lua(keyspace.execute([_lua_word(word) for word in words]))

    def _pcall(self, *words: Any) -> Any:
        try:
            return self._call(*words)
        except CommandError as error:
            return self.table_from({b"err": str(error).encode()})

    def _to_lua(self, reply: Any) -> Any:
        """A reply as a script sees it: a nil as false, arrays as tables, a status as ``{ok = ...}``."""
        kind = type(reply)
        if kind is bytes or kind is int:
            return reply
        if reply is None:
            return False
        if kind is list:
            return self.table_from([self._to_lua(item) for item in reply])
        return self.ok if reply is OK else self.table_from({b"ok": bytes(reply)})


def _lua_word(word: Any) -> bytes:
    """A ``redis.call`` argument as Redis takes it: a number as ``%.17g``
    (Redis up to 7.0; later ones differ only for numbers not whole)."""
    kind = type(word)
    if kind is bytes:
        return word  # type: ignore[no-any-return]
    if kind is int or kind is float:
        return b"%.17g" % word
    raise CommandError("ERR Lua redis lib command arguments must be strings or integers")


def _from_lua(value: Any, lua_type: Callable[[Any], str | None]) -> Any:
    """A script's return value as Redis replies it (docs/architecture.rst, embedded-store)."""
    kind = type(value)
    if kind is int or kind is bytes:
        return value
    if kind is float:
        return int(value) if value == value and abs(value) != float("inf") else -(2**63)
    if kind is bool:
        return 1 if value else None
    if lua_type(value) != "table":
        return None
    error, status = value[b"err"], value[b"ok"]
    if type(error) is bytes:
        raise CommandError(error.decode("utf-8", "replace"))
    if type(status) is bytes:
        return Status(status)
    items, i = [], 1
    while value[i] is not None:
        items.append(_from_lua(value[i], lua_type))
        i += 1
    return items


#: The lupa modules scripts may run on, by preference: LuaJIT runs Lua 5.1 several times faster, where lupa has it.
LUAS = ("luajit21", "lua51")

_HOSTS: dict[str, LuaHost] = {}
#: Every script compiled in the process, by SHA1, to compile it again on a new runtime.
_SOURCES: dict[str, bytes] = {}
#: Held around every embedded command and script: Redis runs one at a time, and the runtimes are the process's.
LOCK = threading.Lock()


def _after_fork() -> None:
    """A child forked mid-call (another thread's) gets a free lock, and new runtimes on which scripts compile again."""
    global LOCK
    LOCK = threading.Lock()
    _HOSTS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def lua_host(name: str | None = None) -> LuaHost:
    """The process's Lua host on ``name``, by default the first of :data:`LUAS` lupa has."""
    if name is None:
        name = next((n for n in LUAS if importlib.util.find_spec(f"lupa.{n}") is not None), LUAS[-1])
    host = _HOSTS.get(name)
    if host is None:
        host = _HOSTS[name] = LuaHost(name)
    return host
