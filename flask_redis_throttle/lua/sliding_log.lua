-- Sliding log: the time of every admitted request, in a sorted set (seed 004).
-- A request at `now` counts the entries in (now - window, now]; refused
-- requests are never added, and entries older than the window are removed
-- whenever one is added.
--
-- Promise: exact. Never more than `quota` admitted in any span of the
-- window's length, and a refusal only when that would be broken. Memory: at
-- most `quota` entries per identity and layer, so this suits small quotas.

local function check(key, quota, period, now, cost)
  local since = string.format('(%.0f', now - period)
  local used = redis.call('ZCOUNT', key, since, '+inf')
  if used + cost <= quota then
    return true, quota - used - cost, period, 0, {now, used, cost, period}
  end
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local reset = newest[2] and math.max(tonumber(newest[2]) + period - now, 0) or 0
  local retry = 0
  if cost <= quota then
    -- The request fits once the excess-th oldest entry in the window is out.
    -- (One costing more than the quota never fits; the driver handles it.)
    local excess = used + cost - quota
    local entry = redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
    retry = tonumber(entry[2]) + period - now
  end
  return false, math.max(quota - used, 0), reset, retry, nil
end

local function record(key, state)
  local now, used, cost, period = state[1], state[2], state[3], state[4]
  local stamp = string.format('%.0f', now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now - period))
  -- Members must be unique. At one instant the count in the window only
  -- grows, so "<time>:<count so far>" never repeats.
  for first = 1, cost, 100 do
    local entries = {}
    for n = first, math.min(first + 99, cost) do
      entries[#entries + 1] = stamp
      entries[#entries + 1] = stamp .. ':' .. (used + n)
    end
    redis.call('ZADD', key, unpack(entries))
  end
  redis.call('PEXPIRE', key, math.ceil(period / 1000) + 1000)
end

local function refund(key, quota, period, now, cost)
  -- Remove `cost` entries stamped `now`, the latest first, so that the
  -- "<time>:<count so far>" members left stay unique.
  local stamp = string.format('%.0f', now)
  local members = redis.call('ZRANGEBYSCORE', key, stamp, stamp)
  local counts = {}
  for _, member in ipairs(members) do
    counts[#counts + 1] = tonumber(string.match(member, ':(%d+)$'))
  end
  table.sort(counts, function(a, b) return a > b end)
  for n = 1, math.min(cost, #counts) do
    redis.call('ZREM', key, stamp .. ':' .. counts[n])
  end
end
