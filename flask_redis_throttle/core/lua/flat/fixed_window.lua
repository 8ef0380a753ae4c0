-- Fixed window, flat: the whole request in one pass, for the usual request
-- (see scripts.py for when it runs): every limit uses fixed-window, none
-- has a penalty, no two of its keys are the same, and it counts or inspects
-- (a cost of 0 or more). prelude.lua and records.lua come first. It takes
-- the arguments and gives the reply of main.lua, decides exactly as
-- fixed_window.lua does there (which explains the arithmetic), and reads
-- and writes the same packed records, so the two can take turns on one
-- key; tests/test_flat.py holds them to that. On the usual path it builds
-- no table per key or layer and no function: each one costs more than the
-- arithmetic.

-- The record, as fixed_window.lua packs it.
local RECORD, SIZE = '<I4I6I4', 14

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
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    -- The record: its window number `a` and count `b`.
    -- include: read.lua
    local used = a == window and b or 0
    local fit, left, retry = used + cost <= quota, quota - used, 0
    if fit then
      left = left - cost
    else
      retry = reset
    end
    if cost > quota then
      fit, retry = false, period
    end
    -- include: decide.lua
    if admitted and writes then
      n = n + 1
      parts[n] = pack_bytes(RECORD, name, window, used + cost)
      if reset > longest then
        longest = reset
      end
    end
  end
  if admitted and writes then
    if at <= #value then
      -- Records other limits that share the scope wrote: kept while their
      -- window lasts (as in fixed_window.lua).
      local function life(value, p, period)
        local _, window = unpack_bytes(RECORD, value, p)
        return (window + 1) * period - now
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
