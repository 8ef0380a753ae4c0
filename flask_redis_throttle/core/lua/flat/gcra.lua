-- GCRA, flat: the whole request in one pass, for the usual request (see
-- scripts.py for when it runs): every limit uses GCRA, none has a penalty,
-- no two of its keys are the same, and it counts or inspects (a cost of 0
-- or more). prelude.lua and records.lua come first. It takes the arguments
-- and gives the reply of main.lua, decides exactly as gcra.lua does there
-- (which explains the arithmetic), and reads and writes the same packed
-- records, so the two can take turns on one key; tests/test_flat.py holds
-- them to that. On the usual path it builds no table per key or layer and
-- no function: each one costs more than the arithmetic.

-- The record's patterns, as packed.lua's patterns() makes them.
local ANCHORED, NAMED, WHOLE = '^(%d+)=(%x+):?(%d*) ?', '=(%x+):?(%d*)', '^(%x+):?(%d*)'
local floor, format, tonumber = math.floor, string.format, tonumber

-- The value each key gets if the request is admitted, and its life.
local values, lives, parts = {}, {}, {}
local writes = cost > 0
local layer, e = 0, 0
for entry in gmatch(ARGV[3], '%S+') do
  e = e + 1
  local value = redis.call('GET', KEYS[e]) or ''
  local n, longest, at = 0, 0, 1
  for quota, name in gmatch(entry, '(%d+)/(%d+)') do
    layer = layer + 1
    quota = quota + 0
    local period = name * 1000000
    local a, p
    a, p, at = read(value, at, name, ANCHORED, NAMED)
    -- The TAT as (tat, part), never before now.
    local tat, part = now, 0
    if a then
      a, p = tonumber(a, 16), tonumber(p) or 0
      if a > now or (a == now and p > 0) then
        tat, part = a, p
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
      parts[n] = next_part > 0 and format('%s=%x:%d', name, next_at, next_part) or format('%s=%x', name, next_at)
      if ahead > longest then
        longest = ahead
      end
    end
  end
  if admitted and writes then
    if at <= #value then
      -- Records other limits that share the scope wrote: kept until their
      -- TAT (as in gcra.lua).
      local function life(tat, part)
        return tonumber(tat, 16) - now + ((tonumber(part) or 0) > 0 and 1 or 0)
      end
      n, longest = keep(value, WHOLE, life, written(entry), parts, n, longest)
    end
    values[e], lives[e] = table.concat(parts, ' ', 1, n), longest
  end
end

if admitted and writes then
  for k = 1, e do
    set(KEYS[k], values[k], lives[k])
  end
end
return reply()
