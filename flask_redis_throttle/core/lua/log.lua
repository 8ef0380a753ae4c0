-- A sliding log's write, which the general script's sliding_log.lua and the
-- flat one both include as text: add `count` entries stamped now to the
-- sorted set `key`. First the entries older than the longest window of any
-- limit that counts in the set go; that window is kept in the set as the
-- member "w" (see sliding_log.lua), grown to `horizon` (microseconds) if
-- it is shorter. The set then lives as long as that window. Times are
-- written with '%d': whole microseconds, formatted as integers, which costs
-- a fraction of '%.0f' for the same text.
local function add_entries(key, horizon, count)
  local format = string.format
  local stored = -(tonumber(redis.call('ZSCORE', key, 'w')) or 0) * 1000000
  horizon = math.max(horizon, stored)
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
