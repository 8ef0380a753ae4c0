-- Sliding window, flat: the whole request in one pass, for the usual
-- request (see scripts.py for when it runs): every limit uses the sliding
-- window, none has a penalty, no two of its keys are the same, and it
-- counts or inspects (a cost of 0 or more). prelude.lua and records.lua
-- come first. It takes the arguments and gives the reply of main.lua,
-- decides exactly as sliding_window.lua does there (which explains the
-- sub-buckets and the record), and reads and writes the same packed
-- records, so the two can take turns on one key; tests/test_flat.py holds
-- them to that. It builds no table per key or layer: a record is read by
-- one unpack into locals, and written back as it was read but for what
-- changes, packed anew (a field read or written costs struct more than
-- the bytes copied around it). Only a refusal, or a record from a clock
-- that went back, puts its counts in a table, the one every layer reuses.

local BUCKETS = 10
-- The record, as sliding_window.lua packs it.
local RECORD, SIZE = '<I4I6I4I4I4I4I4I4I4I4I4I4I4', 54
-- Its window, newest sub-bucket and first count; the counts of no requests.
local HEAD, ZEROS = '<I4I6I4', string.rep('\0', 4 * BUCKETS)
local max, min, sub = math.max, math.min, string.sub

-- The value each key gets if the request is admitted, and its life.
local values, lives, parts = {}, {}, {}
local writes = cost > 0
-- The counts of the record read, newest first, when they are wanted by
-- number.
local counts = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

local layer = 0
local plan, from = ARGV[3], 1
for e = 1, #KEYS do
  -- No entry has a penalty (see prelude.lua's entry_at()).
  local first_layer, last_layer, _
  first_layer, last_layer, _, from = entry_at(plan, from)
  local value = redis.call('GET', KEYS[e]) or ''
  local n, longest, at = 0, 0, 1
  for layer_at = first_layer, last_layer, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, layer_at)
    layer = layer + 1
    local period = name * 1000000
    local width = period / BUCKETS
    local current = (now - fmod(now, width)) / width
    local oldest = current - BUCKETS
    -- The record: `first` is its newest sub-bucket's number, nil for none,
    -- and c1 to c11 its counts, newest first; those up to the `held`-th are
    -- of sub-buckets from `oldest` on, and `used` is their sum.
    local p, first, held, used, _ = nil, nil, 0, 0, nil
    local c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11
    p, at = locate(value, at, name, SIZE)
    if p then
      _, first, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = unpack_bytes(RECORD, value, p)
      held = min(BUCKETS + 1, first - oldest + 1)
      if held > BUCKETS then
        used = c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11
      elseif held > 0 then
        used = c1 + (held > 1 and c2 or 0) + (held > 2 and c3 or 0) + (held > 3 and c4 or 0)
          + (held > 4 and c5 or 0) + (held > 5 and c6 or 0) + (held > 6 and c7 or 0)
          + (held > 7 and c8 or 0) + (held > 8 and c9 or 0) + (held > 9 and c10 or 0)
          + (held > 10 and c11 or 0)
      end
    end
    local fit, newest = used + cost <= quota, nil
    if held > 0 and (not fit or first > current) then
      -- The newest sub-bucket counted, and the counts by number: only a
      -- refusal, or a record from a clock that went back, needs them (else
      -- the current sub-bucket is the newest one).
      local c = counts
      c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11] = c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11
      for k = 1, held do
        if c[k] > 0 then
          newest = first - k + 1
          break
        end
      end
    end
    local left, reset, retry = 0, 0, 0
    if fit then
      left = quota - used - cost
      reset = (max(newest or current, current) + BUCKETS + 1) * width - now
    else
      local rest = used
      for k = held, 1, -1 do
        local count = counts[k]
        rest = rest - count
        if count > 0 and rest + cost <= quota then
          retry = (first - k + 1 + BUCKETS + 1) * width - now
          break
        end
      end
      left = max(quota - used, 0)
      reset = newest and (newest + BUCKETS + 1) * width - now or 0
    end
    if cost > quota then
      fit, retry = false, period
    end
    -- include: decide.lua
    if admitted and writes then
      local top, part = max(first or current, current), nil
      if held <= 0 then
        -- Nothing of the record is in the window, or there is none.
        part = pack_bytes(HEAD, name, current, cost) .. ZEROS
      elseif first >= current then
        -- Only the count the request goes to changes: the current
        -- sub-bucket's, or when the clock went back, the one
        -- sliding_window.lua counts it in.
        local k = min(first - current, BUCKETS)
        local q = p + 10 + 4 * k
        part = sub(value, p, q - 1) .. pack_bytes('<I4', (k == 0 and c1 or counts[k + 1]) + cost) .. sub(value, q + 4, p + SIZE - 1)
      else
        -- The counts read move on by current - first places; those that
        -- move past the last, BUCKETS + 1, are out of the window.
        local shift = current - first
        part = pack_bytes(HEAD, name, current, cost) .. sub(ZEROS, 5, 4 * shift) .. sub(value, p + 10, p + SIZE - 1 - 4 * shift)
      end
      n = n + 1
      parts[n] = part
      local expires = (top + BUCKETS + 1) * width - now
      if expires > longest then
        longest = expires
      end
    end
  end
  if admitted and writes then
    if at <= #value then
      -- Records other limits that share the scope wrote: kept while their
      -- newest sub-bucket is in their window (as in sliding_window.lua).
      local function life(value, p, period)
        local _, top = unpack_bytes('<I4I6', value, p)
        return (top + BUCKETS + 1) * (period / BUCKETS) - now
      end
      n, longest = keep(value, SIZE, life, written(plan, first_layer, last_layer), parts, n, longest)
    end
    values[e], lives[e] = table.concat(parts, '', 1, n), longest
  end
end

if admitted and writes then
  for k = 1, #KEYS do
    set(KEYS[k], values[k], lives[k])
  end
end
return reply()
