-- Sliding window: each window is cut into BUCKETS sub-buckets, and a request
-- is counted against the current sub-bucket and the BUCKETS before it (the
-- sliding-window article keeps one counter per second in the same way).
--
-- Those BUCKETS + 1 sub-buckets always cover the last window's length, and a
-- little more: the oldest of them may hold requests from up to one sub-bucket
-- before the window began. Counting them anyway is what makes the promise
-- hold. Promise: never more than `quota` admitted in any span of the window's
-- length; a refusal may come early by at most one sub-bucket (a tenth of the
-- window).
--
-- A layer's record holds, after its window, the number of its newest
-- sub-bucket, `top`, in 6 bytes, then the counts of sub-buckets top,
-- top - 1, ..., top - BUCKETS, 4 bytes each (a quota is at most 10^9):
-- zeros where none. Memory: one packed string per identity and scope (see
-- records.lua). The window is whole seconds, so a sub-bucket is whole
-- microseconds; sub-bucket numbers stay below 10^14, which 6 bytes hold.
-- Sub-bucket b is counted until sub-bucket b + BUCKETS + 1 begins.
--
-- A record's newest sub-bucket is after the current one only when Redis's
-- clock went back. Its top and counts are then kept as they are, and a
-- request is counted in the oldest sub-bucket the record holds if its own is
-- older still: no count is ever dropped, and a request may be counted for
-- longer than its own sub-bucket would be, never for less.
--
-- A record is read by one unpack into locals and written back as it was
-- read but for what changes, packed anew: a field read or written costs
-- struct more than the bytes copied around it. Only a refusal, an
-- inspection of a layer with counts, or a record from a clock that went
-- back puts its counts in a table, the one every layer reuses.

local BUCKETS = 10
-- (The window, the newest sub-bucket, and BUCKETS + 1 counts.)
local RECORD, SIZE = '<I4I6I4I4I4I4I4I4I4I4I4I4I4', 54
-- A record's window, newest sub-bucket and first count; the counts of no
-- requests.
local HEAD, ZEROS = '<I4I6I4', string.rep('\0', 4 * BUCKETS)
local unpack_bytes, pack_bytes, fmod = struct.unpack, struct.pack, math.fmod
local max, min, sub = math.max, math.min, string.sub
-- The counts of the record read, newest first, when they are wanted by
-- number.
local counts = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

-- The record at p of `value` (nil for none), in the current sub-bucket
-- `current`: its newest sub-bucket's number (nil for none), how many of
-- its counts, newest first, are of sub-buckets still in the window, their
-- sum, and the counts themselves.
local function read(value, p, current)
  if not p then
    return nil, 0, 0
  end
  local _, first, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = unpack_bytes(RECORD, value, p)
  local held, used = min(BUCKETS + 1, first - current + BUCKETS + 1), 0
  if held > BUCKETS then
    used = c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11
  elseif held > 0 then
    used = c1 + (held > 1 and c2 or 0) + (held > 2 and c3 or 0) + (held > 3 and c4 or 0)
      + (held > 4 and c5 or 0) + (held > 5 and c6 or 0) + (held > 6 and c7 or 0)
      + (held > 7 and c8 or 0) + (held > 8 and c9 or 0) + (held > 9 and c10 or 0)
  end
  return first, held, used, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11
end

-- Put a record's counts in `counts`, and return the number of the newest
-- sub-bucket of its first `held` that holds a count (nil for none).
local function numbered(first, held, ...)
  local c = counts
  c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11] = ...
  for k = 1, held do
    if c[k] > 0 then
      return first - k + 1
    end
  end
end

return {
  size = SIZE,

  check = function(now, cost, quota, name, _, value, p)
    local period = name * 1000000
    local width = period / BUCKETS
    local current = (now - fmod(now, width)) / width
    local first, held, used, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = read(value, p, current)
    if used + cost > quota then
      local newest = held > 0 and numbered(first, held, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11)
      -- The first sub-bucket boundary at which enough has aged out, the
      -- oldest first (a request costing more than the quota never fits,
      -- which main.lua handles).
      local retry, rest = 0, used
      for k = held, 1, -1 do
        local count = counts[k]
        rest = rest - count
        if count > 0 and rest + cost <= quota then
          retry = (first - k + 1 + BUCKETS + 1) * width - now
          break
        end
      end
      return false, max(quota - used, 0), newest and (newest + BUCKETS + 1) * width - now or 0, retry
    end
    if cost <= 0 then
      -- Back to the full quota once the newest sub-bucket counted is out;
      -- now if none is.
      local newest = used > 0 and numbered(first, held, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11)
      return true, quota - used, newest and (newest + BUCKETS + 1) * width - now or 0, 0
    end
    -- The newest sub-bucket that holds a count, if it is after the current
    -- one (only when the clock went back); else the current one, which
    -- this request counts in.
    local newest = current
    if held > 0 and first > current then
      newest = max(numbered(first, held, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11) or current, current)
    end
    local reset = (newest + BUCKETS + 1) * width - now
    local record
    if held <= 0 then
      -- Nothing of the record is in the window, or there is none.
      record = pack_bytes(HEAD, name, current, cost) .. ZEROS
    elseif first >= current then
      -- Only the count the request goes to changes: the current
      -- sub-bucket's, or when the clock went back, the oldest the record
      -- holds if its own is older still.
      local k = min(first - current, BUCKETS)
      local q = p + 10 + 4 * k
      record = sub(value, p, q - 1) .. pack_bytes('<I4', (k == 0 and c1 or counts[k + 1]) + cost) .. sub(value, q + 4, p + SIZE - 1)
    else
      -- The counts read move on by current - first places; those that move
      -- past the last, BUCKETS + 1, are out of the window.
      local shift = current - first
      record = pack_bytes(HEAD, name, current, cost) .. sub(ZEROS, 5, 4 * shift) .. sub(value, p + 10, p + SIZE - 1 - 4 * shift)
    end
    local top = max(first or current, current)
    return true, quota - used - cost, reset, 0, record, (top + BUCKETS + 1) * width - now
  end,

  -- Take it out of the sub-bucket it went into, if that still holds a
  -- count: the current one, or when the clock went back, the one check()
  -- counted it in.
  refund = function(now, given, _, name, _, value, p)
    if not p then
      return
    end
    local width = name * 1000000 / BUCKETS
    local current = (now - fmod(now, width)) / width
    local _, first, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = unpack_bytes(RECORD, value, p)
    local c = {c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11}
    local k = min(first - current, BUCKETS) + 1
    if first < current or c[k] == 0 then
      return
    end
    c[k] = max(c[k] - given, 0)
    -- With nothing left, a record of zeros, which is dropped when the key
    -- is next written.
    local top = 0
    for j = 1, BUCKETS + 1 do
      if c[j] > 0 then
        top = first
      end
    end
    local record = pack_bytes(RECORD, name, top, c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11])
    return record, (first + BUCKETS + 1) * width - now
  end,

  life = function(now, value, p, period)
    local _, top = unpack_bytes('<I4I6', value, p)
    return (top + BUCKETS + 1) * (period / BUCKETS) - now
  end,
}
