-- Sliding log, flat: the whole request in one pass, for the usual request
-- (see scripts.py for when it runs): every limit uses the sliding log, none
-- has a penalty, no two of its keys are the same, and it counts or
-- inspects (a cost of 0 or more). It takes the arguments and gives the
-- reply of main.lua, decides exactly as sliding_log.lua does there (which
-- explains the sorted set and its "w" member), and writes the same
-- entries, so the two can take turns on one key; tests/test_flat.py holds
-- them to that. prelude.lua comes first. It builds no table per key or
-- layer, and writes the entries as sliding_log.lua does, with the same
-- function (log.lua).

local format, max, tonumber = string.format, math.max, tonumber
-- include: log.lua
local layer = 0
-- The longest window of each key's layers that counted the request.
local horizons = {}

local plan, from = ARGV[3], 1
local e = #KEYS
for k = 1, e do
  -- No entry has a penalty (see prelude.lua's entry_at()).
  local first_layer, last_layer, _
  first_layer, last_layer, _, from = entry_at(plan, from)
  local key, horizon = KEYS[k], 0
  for at = first_layer, last_layer, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, at)
    layer = layer + 1
    local period = name * 1000000
    local since = format('(%d', now - period)
    local used = redis.call('ZCOUNT', key, since, '+inf')
    local fit, left, reset, retry = used + cost <= quota, 0, period, 0
    if fit then
      left = quota - used - cost
      horizon = max(horizon, period)
    else
      local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      local stamp = tonumber(newest[2])
      if cost <= quota then
        local excess = used + cost - quota
        local oldest = redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
        retry = tonumber(oldest[2]) + period - now
      end
      left = max(quota - used, 0)
      reset = stamp and stamp > 0 and max(stamp + period - now, 0) or 0
    end
    if cost > quota then
      fit, retry = false, period
    end
    -- include: decide.lua
  end
  horizons[k] = horizon
end

if admitted and cost > 0 then
  for k = 1, e do
    add_entries(KEYS[k], horizons[k], cost)
  end
end
return reply()
