-- GCRA, flat: the whole request in one pass, for the usual request (see
-- scripts.py for when it runs): every limit uses GCRA, none has a penalty,
-- no two of its keys are the same, and it counts or inspects (a cost of 0
-- or more). prelude.lua and records.lua come first. It takes the arguments
-- and gives the reply of main.lua, decides exactly as gcra.lua does there
-- (which explains the arithmetic), and reads and writes the same packed
-- records, so the two can take turns on one key; tests/test_flat.py holds
-- them to that. On the usual path it builds no table per key or layer and
-- no function: each one costs more than the arithmetic.

-- The record, as gcra.lua packs it.
local RECORD, SIZE = '<I4I8I4', 16
local floor = math.floor

-- The value each key gets if the request is admitted, and its life.
local values, lives, parts = {}, {}, {}
local writes = cost > 0
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
    -- The record: the TAT's microseconds `a` and remainder `b`.
    -- include: read.lua
    -- The TAT as (tat, part), never before now.
    local tat, part = now, 0
    if found then
      if a > now or (a == now and b > 0) then
        tat, part = a, b
        if part >= quota then
          tat, part = tat + 1, 0
        end
      end
    end
    local share = fmod(period, quota)
    local step = (period - share) / quota
    local extra = part + cost * share
    local next_part = fmod(extra, quota)
    local next_at = tat + cost * step + (extra - next_part) / quota
    local ahead = next_at - now + (next_part > 0 and 1 or 0)
    local fit, left, reset, retry = ahead <= period, 0, ahead, 0
    if fit then
      left = floor(((period - (next_at - now)) * quota - next_part) / period)
    else
      retry = ahead - period
      left = math.max(floor(((period - (tat - now)) * quota - part) / period), 0)
      reset = tat - now + (part > 0 and 1 or 0)
    end
    if cost > quota then
      fit, retry = false, period
    end
    -- include: decide.lua
    if admitted and writes then
      n = n + 1
      parts[n] = pack_bytes(RECORD, name, next_at, next_part)
      if ahead > longest then
        longest = ahead
      end
    end
  end
  if admitted and writes then
    if at <= #value then
      -- Records other limits that share the scope wrote: kept until their
      -- TAT (as in gcra.lua).
      local function life(value, p)
        local _, tat, part = unpack_bytes(RECORD, value, p)
        return tat - now + (part > 0 and 1 or 0)
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
