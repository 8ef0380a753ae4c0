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
-- packed.lua).
--
-- A record's newest sub-bucket is after the current one only when Redis's
-- clock went back. Its top and counts are then kept as they are, and a
-- request is counted in the oldest sub-bucket the record holds if its own is
-- older still: no count is ever dropped, and a request may be counted for
-- longer than its own sub-bucket would be, never for less.

local BUCKETS = 10

local strategy = {}
-- (The window, the newest sub-bucket, and BUCKETS + 1 counts.)
local RECORD, SIZE = '<I4I6I4I4I4I4I4I4I4I4I4I4I4', 54

function strategy.load(key)
  return packed.load(key, RECORD, SIZE)
end

-- The number of layer `name`'s newest sub-bucket in `state`, and the counts
-- of it and of the BUCKETS before it, newest first; nothing for no record.
local function counts_of(state, name)
  local first, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = fields(state, name)
  if first then
    return first, {c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11}
  end
end

-- Layer `name`'s record: sub-bucket `top` and its counts `c`, newest first.
local function record(name, top, c)
  return pack_bytes(RECORD, name, top, c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11])
end

-- The counts of a record that counts `cost` more in sub-bucket `current`,
-- newest first from max(first, current), from those of the record read
-- (`first`, `counts`, which it changes; nil for none). Sub-buckets older
-- than current - BUCKETS are out of the window and dropped.
local function counted(first, counts, current)
  if not first then
    return {cost, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  end
  if first > current then
    -- The clock went back: no count is dropped (see above).
    local k = math.min(first - current, BUCKETS) + 1
    counts[k] = counts[k] + cost
    return counts
  end
  local shift = math.min(current - first, BUCKETS + 1)
  for k = BUCKETS + 1, shift + 1, -1 do
    counts[k] = counts[k - shift]
  end
  for k = 1, shift do
    counts[k] = 0
  end
  counts[1] = counts[1] + cost
  return counts
end

-- Check each layer of the entry, numbering them on from i. The window is
-- whole seconds, so a sub-bucket is whole microseconds; sub-bucket numbers
-- stay below 10^14, which 6 bytes hold.
function strategy.check(state, plan, first_layer, last_layer, i)
  for at = first_layer, last_layer, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, at)
    i = i + 1
    local period = name * 1000000
    quotas[i], periods[i] = quota, period
    local width = period / BUCKETS
    local current = (now - fmod(now, width)) / width
    local oldest = current - BUCKETS
    local first, counts = counts_of(state, name)
    -- Sub-buckets after the current one only exist if the clock went back;
    -- counting them too keeps the promise. Counts k = 1, ..., held are of
    -- sub-buckets from `oldest` on.
    local used, newest, held = 0, nil, first and math.min(BUCKETS + 1, first - oldest + 1) or 0
    for k = 1, held do
      local count = counts[k]
      if count > 0 then
        used = used + count
        newest = newest or first - k + 1
      end
    end
    -- Sub-bucket b is counted until sub-bucket b + BUCKETS + 1 begins.
    if used + cost <= quota then
      local top = math.max(first or current, current)
      local reset = (math.max(newest or current, current) + BUCKETS + 1) * width - now
      fits[i], remaining[i], resets[i], retries[i] = true, quota - used - cost, reset, 0
      if cost > 0 then
        note(state, name, record(name, top, counted(first, counts, current)), (top + BUCKETS + 1) * width - now)
      end
    else
      -- The first sub-bucket boundary at which enough has aged out, the
      -- oldest first (a request costing more than the quota never fits,
      -- which main.lua handles).
      local retry, left = 0, used
      for k = held, 1, -1 do
        local count = counts[k]
        left = left - count
        if count > 0 and left + cost <= quota then
          retry = (first - k + 1 + BUCKETS + 1) * width - now
          break
        end
      end
      fits[i], remaining[i], retries[i] = false, math.max(quota - used, 0), retry
      resets[i] = newest and (newest + BUCKETS + 1) * width - now or 0
    end
  end
  return i
end

-- Whether every one of `counts` is 0.
local function empty(counts)
  for k = 1, BUCKETS + 1 do
    if counts[k] > 0 then
      return false
    end
  end
  return true
end

function strategy.refund(state, plan, first_layer, last_layer, given)
  -- Take it out of the sub-bucket it went into, if that still holds a
  -- count: the current one, or when the clock went back, the one check()
  -- counted it in.
  for at = first_layer + 4, last_layer + 4, 8 do
    local name = unpack_bytes('<I4', plan, at)
    local width = name * 1000000 / BUCKETS
    local current = (now - fmod(now, width)) / width
    local first, counts = counts_of(state, name)
    local k = first and first >= current and math.min(first - current, BUCKETS) + 1
    if k and counts[k] > 0 and packed.first_refund(state, name) then
      counts[k] = math.max(counts[k] - given, 0)
      -- With nothing left, a record of zeros, which is dropped when the key
      -- is stored.
      local top = empty(counts) and 0 or first
      note(state, name, record(name, top, counts), (first + BUCKETS + 1) * width - now)
    end
  end
end

local function life(value, p, period)
  local _, top = unpack_bytes('<I4I6', value, p)
  return (top + BUCKETS + 1) * (period / BUCKETS) - now
end

function strategy.store(state)
  packed.store(state, life)
end
