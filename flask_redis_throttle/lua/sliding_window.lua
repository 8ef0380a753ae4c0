-- Sliding window: each window is cut into BUCKETS sub-buckets, and a request
-- is counted against the current sub-bucket and the BUCKETS before it (seed
-- 002, pattern 3, keeps one counter per second in the same way).
--
-- Those BUCKETS + 1 sub-buckets always cover the last window's length, and a
-- little more: the oldest of them may hold requests from up to one sub-bucket
-- before the window began. Counting them anyway is what makes the promise
-- hold. Promise: never more than `quota` admitted in any span of the window's
-- length; a refusal may come early by at most one sub-bucket (a tenth of the
-- window). Memory: a hash of at most BUCKETS + 1 small integers per identity
-- and layer, field = sub-bucket number, value = requests admitted in it.

local BUCKETS = 10

local function check(key, quota, period, now, cost)
  -- The window is whole seconds, so a sub-bucket is whole microseconds.
  local width = period / BUCKETS
  local current = (now - math.fmod(now, width)) / width
  local oldest = current - BUCKETS
  local used, newest = 0, nil
  local counted, stale = {}, {}
  local fields = redis.call('HGETALL', key)
  for j = 1, #fields, 2 do
    local bucket, count = tonumber(fields[j]), tonumber(fields[j + 1])
    if bucket < oldest then
      stale[#stale + 1] = fields[j]
    else
      -- Buckets after the current one only exist if the clock went back;
      -- counting them too keeps the promise.
      used = used + count
      counted[#counted + 1] = {bucket, count}
      if not newest or bucket > newest then
        newest = bucket
      end
    end
  end
  -- Sub-bucket b is counted until sub-bucket b + BUCKETS + 1 begins.
  local function until_gone(bucket)
    return (bucket + BUCKETS + 1) * width - now
  end
  if used + cost <= quota then
    local reset = until_gone(newest and math.max(newest, current) or current)
    return true, quota - used - cost, reset, 0, {current, cost, stale, reset}
  end
  -- Find the first sub-bucket boundary at which enough has aged out. (A
  -- request costing more than the quota never fits; the driver handles it.)
  table.sort(counted, function(a, b) return a[1] < b[1] end)
  local retry, left = 0, used
  for _, entry in ipairs(counted) do
    left = left - entry[2]
    if left + cost <= quota then
      retry = until_gone(entry[1])
      break
    end
  end
  return false, math.max(quota - used, 0), newest and until_gone(newest) or 0, retry, nil
end

local function record(key, state)
  local current, cost, stale, reset = state[1], state[2], state[3], state[4]
  redis.call('HINCRBY', key, string.format('%.0f', current), cost)
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
  redis.call('PEXPIRE', key, math.ceil(reset / 1000) + 1000)
end

local function refund(key, quota, period, now, cost)
  -- Take it out of the sub-bucket it went into, if that is still kept.
  local width = period / BUCKETS
  local field = string.format('%.0f', (now - math.fmod(now, width)) / width)
  local count = tonumber(redis.call('HGET', key, field))
  if not count then
    return
  end
  if count > cost then
    redis.call('HINCRBY', key, field, -cost)
  else
    redis.call('HDEL', key, field)
  end
end
