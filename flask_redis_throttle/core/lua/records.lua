-- Packed keys: fixed-window, sliding-window and GCRA keep every layer of an
-- identity under one scope in one string, a record per layer, one after
-- the other. A record is packed with Redis's struct library, as
-- little-endian unsigned integers of sizes fixed per strategy: first the
-- layer's window in whole seconds ('<I4'), then the strategy's own fields
-- (its file says which). A layer's record is found by its window, so
-- records that other limits sharing the scope wrote are kept (while they
-- are live). One GET and at most one SET per key, whatever the number of
-- layers. Binary rather than text: a number read from text costs Redis a
-- strtod() and one written a sprintf(), a pattern finds a record by
-- matching it character by character, and struct does none of that.
--
-- The key's TTL is the longest live record's, plus a second: the second
-- means a key is never gone early when the time a script decides at is a
-- moment behind Redis's expiry clock, as it is when tests pin the time.
--
-- This file is what the general script (with packed.lua) and the flat
-- scripts (see flat/) share: finding a layer's record, keeping the records
-- of other limits, writing the key. Every request runs it, so it reads the
-- value in place rather than splitting it into tables, and defines plain
-- functions (a table of them costs a request more than the calls).

local pack_bytes = struct.pack

-- Where layer `name`'s record starts in `value` (the key's string, '' for
-- none), each record `size` bytes long; nil when it has none. The records
-- of one limit are written in its plan's order, so each layer's is looked
-- for first where the last one read ended, `at`; only then anywhere.
-- Returns, second, where the next record is looked for first: after this
-- one if it was at `at`, else `at` still. Once that is past the end, every
-- record of the value was read in order, and none is left for keep() to
-- find.
local function locate(value, at, name, size)
  local last = #value - size + 1
  if at <= last and unpack_bytes('<I4', value, at) == name then
    return at, at + size
  end
  for p = 1, last, size do
    if unpack_bytes('<I4', value, p) == name then
      return p, at
    end
  end
  return nil, at
end

-- Add to `parts`, which holds n records, the records of `value` (each
-- `size` bytes) that this request does not write (`written(name)` is
-- false) and that are still live: life(value, p, period) is how many more
-- microseconds the record at p, of a window of `period` microseconds, must
-- be kept; 0 or less, and it goes. Returns the new n and the longest life,
-- at least `longest`.
local function keep(value, size, life, written, parts, n, longest)
  for p = 1, #value - size + 1, size do
    local name = unpack_bytes('<I4', value, p)
    if not written(name) then
      local left = life(value, p, name * 1000000)
      if left > 0 then
        n = n + 1
        parts[n] = string.sub(value, p, p + size - 1)
        if left > longest then
          longest = left
        end
      end
    end
  end
  return n, longest
end

-- A flat script's written() for keep(): whether `name` is the window of
-- one of the layers at `first_layer` to `last_layer` of the plan, all of
-- which the request writes.
local function written(plan, first_layer, last_layer)
  return function(name)
    for at = first_layer + 4, last_layer + 4, 8 do
      if unpack_bytes('<I4', plan, at) == name then
        return true
      end
    end
    return false
  end
end

-- Write `value` to `key`, to be kept `life` microseconds and a second.
local function set(key, value, life)
  -- (A number Redis is given is formatted with '%.17g'; '%d' costs less.)
  redis.call('SET', key, value, 'PX', string.format('%d', math.ceil(life / 1000) + 1000))
end
