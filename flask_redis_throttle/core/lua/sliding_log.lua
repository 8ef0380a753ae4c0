-- Sliding log: the time of every admitted request, in a sorted set (the
-- sliding-log article). A layer counts the entries in (now - window, now];
-- refused requests are never added.
--
-- Every layer of an identity under one scope counts in one sorted set, so a
-- request adds its entries once, however many layers it has. Entries older
-- than the longest window any limit has used on the set are removed
-- whenever one is added; that window is kept in the set itself, as the
-- member "w" with minus its length in seconds as its score, which no layer
-- counts (their ranges start after now - window, far above 0).
--
-- Promise: exact. Never more than `quota` admitted in any span of the
-- window's length, and a refusal only when that would be broken. Memory: an
-- entry per request in the longest window, so this suits small quotas.

-- include: log.lua

local strategy = {}

function strategy.load(key)
  return {key = key, horizon = 0}
end

-- Check each layer of the entry, numbering them on from i.
function strategy.check(state, plan, first_layer, last_layer, i)
  local key = state.key
  for at = first_layer, last_layer, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, at)
    i = i + 1
    local period = name * 1000000
    quotas[i], periods[i] = quota, period
    local since = string.format('(%.0f', now - period)
    local used = redis.call('ZCOUNT', key, since, '+inf')
    if used + cost <= quota then
      fits[i], remaining[i], resets[i], retries[i] = true, quota - used - cost, period, 0
      if cost > 0 then
        state.add = cost
        state.horizon = math.max(state.horizon, period)
      end
    else
      local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      local stamp = tonumber(newest[2])
      local retry = 0
      if cost <= quota then
        -- The request fits once the excess-th oldest entry in the window is
        -- out. (One costing more than the quota never fits; main.lua
        -- handles it.)
        local excess = used + cost - quota
        local entry = redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
        retry = tonumber(entry[2]) + period - now
      end
      fits[i], remaining[i], retries[i] = false, math.max(quota - used, 0), retry
      resets[i] = stamp and stamp > 0 and math.max(stamp + period - now, 0) or 0
    end
  end
  return i
end

function strategy.refund(state, plan, first_layer, last_layer, given)
  -- Once for the whole set: remove `given` entries stamped `now`, the latest
  -- first, so that the "<time>:<number>" members left stay unique.
  if state.refunded then
    return
  end
  state.refunded = true
  local stamp = string.format('%.0f', now)
  local members = redis.call('ZRANGEBYSCORE', state.key, stamp, stamp)
  local numbers = {}
  for _, member in ipairs(members) do
    numbers[#numbers + 1] = tonumber(string.match(member, ':(%d+)$'))
  end
  table.sort(numbers, function(a, b) return a > b end)
  for n = 1, math.min(given, #numbers) do
    redis.call('ZREM', state.key, stamp .. ':' .. numbers[n])
  end
end

function strategy.store(state)
  if state.add then
    add_entries(state.key, state.horizon, state.add)
  end
end
