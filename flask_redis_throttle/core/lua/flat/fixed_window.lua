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

-- The record's patterns, as packed.lua's patterns() makes them.
local ANCHORED, NAMED, WHOLE = '^(%d+)=(%d+):(%d+) ?', '=(%d+):(%d+)', '^(%d+):(%d+)'

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
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    local counted, count
    counted, count, at = read(value, at, name, ANCHORED, NAMED)
    local used = 0
    -- The record's window, as read, is written back as it is: one number
    -- less to format.
    if counted and counted + 0 == window then
      used, window = count + 0, counted
    end
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
      parts[n] = name .. '=' .. window .. ':' .. (used + cost)
      if reset > longest then
        longest = reset
      end
    end
  end
  if admitted and writes then
    if at <= #value then
      -- Records other limits that share the scope wrote: kept while their
      -- window lasts (as in fixed_window.lua).
      local function life(window, count, period)
        return (window + 1) * period - now
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
