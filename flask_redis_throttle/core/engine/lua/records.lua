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
-- Plain functions, every value they use a parameter: main.lua calls them
-- for every packed key. (They read the value in place rather than
-- splitting it into tables: each table a request builds costs Redis more
-- than the arithmetic.)

local unpack_bytes = struct.unpack

-- Where layer `name`'s record starts in `value` (the key's string, '' for
-- none), each record `size` bytes long; nil when it has none. (main.lua
-- first looks where the last record it read ended, since one limit writes
-- its layers in its plan's order, and calls this only when it is not
-- there.)
local function locate(value, name, size)
  for p = 1, #value - size + 1, size do
    if unpack_bytes('<I4', value, p) == name then
      return p
    end
  end
end

-- Add to `parts`, which holds n records, the records of `value` (each
-- `size` bytes) that this request does not write, those whose windows are
-- not those of the layers at `first` to `last` of `plan` (see main.lua),
-- and that are still live: life(now, value, p, period) is how many more
-- microseconds the record at p, of a window of `period` microseconds, must
-- be kept; 0 or less, and it goes. Returns the new n and the longest life,
-- at least `longest`.
local function keep(value, size, life, now, plan, first, last, parts, n, longest)
  for p = 1, #value - size + 1, size do
    local name = unpack_bytes('<I4', value, p)
    local written = false
    for at = first + 4, last + 4, 8 do
      if unpack_bytes('<I4', plan, at) == name then
        written = true
        break
      end
    end
    if not written then
      local left = life(now, value, p, name * 1000000)
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
