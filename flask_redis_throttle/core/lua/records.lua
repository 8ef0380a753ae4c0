-- Packed keys: fixed-window, sliding-window and GCRA keep every layer of an
-- identity under one scope in one string, a record per layer, separated by
-- spaces: "<window>=<record>", where <window> is the layer's window in whole
-- seconds and <record> is the strategy's own. A layer's record is found by
-- its window, so records that other limits sharing the scope wrote are kept
-- (while they are live). One GET and at most one SET per key, whatever the
-- number of layers. The key's TTL is the longest live record's, plus a
-- second: the second means a key is never gone early when the time a script
-- decides at is a moment behind Redis's expiry clock, as it is when tests
-- pin the time.
--
-- This file is what the general script (with packed.lua) and the flat
-- scripts (see flat/) share: finding a layer's record, keeping the records
-- of other limits, writing the key. Every request runs it, so it reads the
-- value in place rather than splitting it into tables, and defines plain
-- functions (a table of them costs a request more than the calls).

-- Layer `name`'s record in `value` (the key's string, '' for none). The
-- records of one limit are written in its plan's order, so each layer's is
-- looked for first where the last one read ended, `at`, with the pattern
-- `anchored`; only then, with `named`, anywhere. Returns the record's two
-- fields as text (nil when it has none), and where the next record starts:
-- after this one if it was at `at`, else `at` still. Once that is past the
-- end, every record of the value was read in order, and none is left for
-- keep() to find.
local function read(value, at, name, anchored, named)
  local _, last, found, a, b = find(value, anchored, at)
  if found == name then
    return a, b, last + 1
  end
  _, _, a, b = find(' ' .. value, ' ' .. name .. named)
  return a, b, at
end

-- Add to `parts`, which holds n records, the records of `value` that this
-- request does not write (`written(name)` is false) and that are still
-- live: life(a, b, period) is how many more microseconds the record with
-- fields a, b (as `whole` matches them) must be kept; 0 or less, and it
-- goes. Returns the new n and the longest life, at least `longest`.
local function keep(value, whole, life, written, parts, n, longest)
  for name, record in gmatch(' ' .. value, ' (%d+)=(%S+)') do
    local a, b = string.match(record, whole)
    if a and not written(name) then
      local left = life(a, b, name * 1000000)
      if left > 0 then
        n = n + 1
        parts[n] = name .. '=' .. record
        if left > longest then
          longest = left
        end
      end
    end
  end
  return n, longest
end

-- A flat script's written() for keep(): whether `name` is a layer of the
-- plan entry `entry`, all of whose layers the request writes.
local function written(entry)
  local names = ',' .. string.sub(entry, 3) .. ','
  return function(name)
    return find(names, '/' .. name .. ',', 1, true) ~= nil
  end
end

-- Write `value` to `key`, to be kept `life` microseconds and a second.
local function set(key, value, life)
  -- (A number Redis is given is formatted with '%.17g'; '%d' costs less.)
  redis.call('SET', key, value, 'PX', string.format('%d', math.ceil(life / 1000) + 1000))
end
