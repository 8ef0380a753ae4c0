-- Sliding log: the time of every admitted request, in a sorted set (the
-- sliding-log article). A layer counts the entries in (now - window, now];
-- refused requests are never added.
--
-- Every layer of an identity under one scope counts in one sorted set, so a
-- request adds its entries once, however many layers it has. Entries older
-- than the longest window any limit has used on the set are removed
-- whenever one is added; that window is kept in the set itself, as the
-- member "w" with minus its length in seconds as its score, which no layer
-- counts (their ranges start after now - window, far above 0). Times are
-- written with '%d': whole microseconds, formatted as integers, which
-- costs a fraction of '%.0f' for the same text.
--
-- Promise: exact. Never more than `quota` admitted in any span of the
-- window's length, and a refusal only when that would be broken. Memory: an
-- entry per request in the longest window, so this suits small quotas.
--
-- Not packed: check() reads the set itself, and store() writes it, once per
-- key, given the longest window of the layers that counted the request.

local format, tonumber, max = string.format, tonumber, math.max

-- Add `count` entries stamped `now` to the sorted set `key`. First the
-- entries older than the longest window of any limit that counts in the
-- set go; that window (the member "w") is grown to `horizon` (microseconds)
-- if it is shorter. The set then lives as long as that window.
local function add(now, key, horizon, count)
  local stored = -(tonumber(redis.call('ZSCORE', key, 'w')) or 0) * 1000000
  horizon = max(horizon, stored)
  if horizon > stored then
    redis.call('ZADD', key, format('%d', -horizon / 1000000), 'w')
  end
  redis.call('ZREMRANGEBYSCORE', key, 0, format('%d', now - horizon))
  -- Members are unique: "<time>:<number>", numbered on from the entries
  -- already stamped with this time.
  local stamp = format('%d', now)
  local before = redis.call('ZCOUNT', key, stamp, stamp)
  for first = 1, count, 100 do
    local entries = {}
    for n = first, math.min(first + 99, count) do
      entries[#entries + 1] = stamp
      entries[#entries + 1] = stamp .. ':' .. (before + n)
    end
    redis.call('ZADD', key, unpack(entries))
  end
  redis.call('PEXPIRE', key, math.ceil(horizon / 1000) + 1000)
end

-- Remove `given` entries stamped `now` from the set `key`, the latest
-- first, so that the "<time>:<number>" members left stay unique.
local function remove(now, key, given)
  local stamp = format('%d', now)
  local members = redis.call('ZRANGEBYSCORE', key, stamp, stamp)
  local numbers = {}
  for _, member in ipairs(members) do
    numbers[#numbers + 1] = tonumber(string.match(member, ':(%d+)$'))
  end
  table.sort(numbers, function(a, b) return a > b end)
  for n = 1, math.min(given, #numbers) do
    redis.call('ZREM', key, stamp .. ':' .. numbers[n])
  end
end

return {
  check = function(now, cost, quota, name, key)
    local period = name * 1000000
    local since = format('(%d', now - period)
    local used = redis.call('ZCOUNT', key, since, '+inf')
    if used + cost <= quota then
      if cost > 0 then
        return true, quota - used - cost, period, 0, '', period
      end
      if used == 0 then
        return true, quota, 0, 0
      end
    end
    -- Back to the full quota once the newest entry is out of the window.
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local stamp = tonumber(newest[2])
    local reset = stamp and stamp > 0 and max(stamp + period - now, 0) or 0
    if used + cost <= quota then
      return true, quota - used, reset, 0
    end
    local retry = 0
    if cost <= quota then
      -- The request fits once the excess-th oldest entry in the window is
      -- out. (One costing more than the quota never fits; main.lua handles
      -- it.)
      local excess = used + cost - quota
      local entry = redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
      retry = tonumber(entry[2]) + period - now
    end
    return false, max(quota - used, 0), reset, retry
  end,

  -- A refund is given back once for the whole set, by store().
  refund = function()
    return '', 0
  end,

  -- What the layers of the request noted: `horizon` is the longest window
  -- of those that counted it; a negative cost is a refund.
  store = function(now, cost, key, _, horizon)
    if cost > 0 then
      add(now, key, horizon, cost)
    else
      remove(now, key, -cost)
    end
  end,
}
